"""masked_rowsum: the sum of each row's last-dim values where an optional int8 mask is nonzero."""
