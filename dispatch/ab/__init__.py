"""A/B testing of backends."""
