// The part of a dispatch call's key that comes from one tensor argument, read from torch's
// TensorImpl: what the Python key reads through five attribute lookups (class, dtype, device,
// shape, strides, and whether autograd records the call), as one bytes object, in ~40 ns.
//
// Layout (int64 words): class address, scalar type, device (type << 16 | index), flags (1: autograd
// records the call, 2: the tensor is a negated view, 4: a conjugated one, 8: torch.autocast is on
// for the tensor's device type, CUDA or CPU), rank, sizes, strides. The view bits keep calls on such
// views under keys of their own, so that the kernels resolved for the others need not look for them
// on every call; the autocast bit keeps calls made under autocast apart (dispatch/_autocast.py).
// Every class met is held in a set for the life of the process, so no two classes ever share an
// address in a key.
//
// A tensor without strides (sparse, nested) raises RuntimeError and one with symbolic sizes
// raises TypeError, as the Python key does: the op function then resolves the call each time.
//
// The bytes objects made last are kept in a small table indexed by a hash of their words (256
// slots, one object each, replaced on a collision): a tensor whose facts match a slot's gets that
// object back, whose hash Python has computed already and which a stored key holds by identity,
// so the call's dict lookup neither hashes nor compares the bytes again.
#include <Python.h>

#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>
#include <exception>

namespace {

constexpr int64_t kMaxRank = 64;
constexpr int64_t kMaxWords = 5 + 2 * kMaxRank;
constexpr size_t kSlots = 256;
PyObject* seen_classes = nullptr;
PyTypeObject* last_class = nullptr;

struct Slot {
  PyObject* bytes = nullptr;  // owned; its contents are the words of the key
  uint64_t hash = 0;
};
Slot slots[kSlots];

// The key's bytes object for ``words``: the slot's when it holds the same words, else a new one
// (which takes the slot).
PyObject* intern(const int64_t* words, int64_t n) {
  const size_t size = static_cast<size_t>(n) * sizeof(int64_t);
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over the words
  for (int64_t i = 0; i < n; ++i) h = (h ^ static_cast<uint64_t>(words[i])) * 1099511628211ULL;
  Slot& slot = slots[(h ^ (h >> 29)) & (kSlots - 1)];
  if (slot.bytes != nullptr && slot.hash == h && static_cast<size_t>(PyBytes_GET_SIZE(slot.bytes)) == size &&
      std::memcmp(PyBytes_AS_STRING(slot.bytes), words, size) == 0) {
    Py_INCREF(slot.bytes);
    return slot.bytes;
  }
  PyObject* bytes = PyBytes_FromStringAndSize(reinterpret_cast<const char*>(words), static_cast<Py_ssize_t>(size));
  if (bytes == nullptr) return nullptr;
  Py_INCREF(bytes);
  PyObject* old = slot.bytes;
  slot.bytes = bytes;
  slot.hash = h;
  Py_XDECREF(old);
  return bytes;
}

PyObject* tensor_key(PyObject*, PyObject* obj) {
  if (!THPVariable_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "expected a tensor, got %.200s", Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  PyTypeObject* cls = Py_TYPE(obj);
  if (cls != last_class) {
    if (PySet_Add(seen_classes, reinterpret_cast<PyObject*>(cls)) < 0) return nullptr;
    last_class = cls;
  }
  try {
    const at::Tensor& t = THPVariable_Unpack(obj);
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (impl->layout() != c10::kStrided) {
      PyErr_SetString(PyExc_RuntimeError, "a tensor of this layout has no strides");
      return nullptr;
    }
    if (impl->has_symbolic_sizes_strides()) {
      PyErr_SetString(PyExc_TypeError, "a tensor with symbolic sizes has no hashable key");
      return nullptr;
    }
    const int64_t rank = impl->dim();
    if (rank > kMaxRank) {
      PyErr_SetString(PyExc_TypeError, "a tensor of rank over 64 is not keyed");
      return nullptr;
    }
    int64_t words[kMaxWords];
    const c10::Device device = impl->device();
    words[0] = static_cast<int64_t>(reinterpret_cast<intptr_t>(cls));
    words[1] = static_cast<int64_t>(impl->dtype().toScalarType());
    words[2] = (static_cast<int64_t>(device.type()) << 16) | static_cast<uint16_t>(device.index());
    words[3] = ((impl->requires_grad() && c10::GradMode::is_enabled()) ? 1 : 0) | (impl->is_neg() ? 2 : 0) |
               (impl->is_conj() ? 4 : 0) |
               ((device.is_cuda() || device.is_cpu()) && at::autocast::is_autocast_enabled(device.type()) ? 8 : 0);
    words[4] = rank;
    const auto sizes = impl->sizes();
    const auto strides = impl->strides();
    for (int64_t i = 0; i < rank; ++i) {
      words[5 + i] = sizes[i];
      words[5 + rank + i] = strides[i];
    }
    return intern(words, 5 + 2 * rank);
  } catch (const std::exception& e) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyMethodDef methods[] = {
    {"tensor_key", tensor_key, METH_O, "The key of one tensor argument (bytes)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dispatch_call_key", "dispatch's call key, native", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__dispatch_call_key(void) {
  seen_classes = PySet_New(nullptr);
  if (seen_classes == nullptr) return nullptr;
  return PyModule_Create(&module);
}
