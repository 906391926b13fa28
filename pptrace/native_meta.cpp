// pptrace's optional native metadata reader (see pptrace/native.py, which builds and loads it).
//
// Reads what an event needs from each plain tensor of a dict (shape, dtype, device, contiguity)
// in one call, into one bytes object of int64s, instead of four Python attribute reads per
// tensor. It never reads tensor memory, never syncs a device, never calls Python code (no
// __eq__, no __hash__, no __torch_function__), and hands anything it is not sure of back to the
// Python reads by returning None: a value that is not exactly torch.Tensor, a layout other than
// strided, nested or symbolic-shaped tensors, a container that is not exactly a dict.
//
// Packed layout, per tensor, in the dict's order:
//   ndim, size[0] .. size[ndim-1], scalar type, device type, device index, contiguous (0/1)

#include <Python.h>

#include <torch/csrc/Device.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <vector>

namespace {

// Appends one tensor's fields; false when this reader must leave the value to Python.
bool put(PyObject* value, std::vector<int64_t>& out) {
  if (THPVariableClass == nullptr ||
      Py_TYPE(value) != reinterpret_cast<PyTypeObject*>(THPVariableClass)) {
    return false;
  }
  const at::Tensor& t = THPVariable_Unpack(value);
  if (!t.defined() || t.layout() != c10::kStrided || t.is_nested()) {
    return false;
  }
  if (t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
    return false;
  }
  const auto sizes = t.sizes();
  out.push_back(static_cast<int64_t>(sizes.size()));
  for (const int64_t s : sizes) {
    out.push_back(s);
  }
  const c10::Device device = t.device();
  out.push_back(static_cast<int64_t>(t.scalar_type()));
  out.push_back(static_cast<int64_t>(device.type()));
  out.push_back(static_cast<int64_t>(device.index()));
  out.push_back(t.is_contiguous() ? 1 : 0);
  return true;
}

PyObject* pack(const std::vector<int64_t>& fields) {
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(fields.data()),
                                   static_cast<Py_ssize_t>(fields.size() * sizeof(int64_t)));
}

// inserted(d, start) -> bytes | None: the values of d from position ``start`` on (what an attach
// inserted after the ``start`` keys that were there before).
PyObject* inserted(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyDict_CheckExact(args[0]) || !PyLong_CheckExact(args[1])) {
    Py_RETURN_NONE;
  }
  const Py_ssize_t start = PyLong_AsSsize_t(args[1]);
  if (start < 0) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  try {
    std::vector<int64_t> fields;
    fields.reserve(32);
    Py_ssize_t pos = 0;
    Py_ssize_t index = 0;
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    while (PyDict_Next(args[0], &pos, &key, &value)) {
      if (index++ < start) {
        continue;
      }
      if (!put(value, fields)) {
        Py_RETURN_NONE;
      }
    }
    return pack(fields);
  } catch (...) {
    Py_RETURN_NONE;
  }
}

// prefixed(d, prefix) -> bytes | None: the values of d whose key is a str (or a str subclass)
// starting with ``prefix`` (what an extract will take).
PyObject* prefixed(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyDict_CheckExact(args[0]) || !PyUnicode_CheckExact(args[1])) {
    Py_RETURN_NONE;
  }
  try {
    std::vector<int64_t> fields;
    fields.reserve(32);
    Py_ssize_t pos = 0;
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    while (PyDict_Next(args[0], &pos, &key, &value)) {
      if (!PyUnicode_Check(key)) {
        continue;
      }
      const Py_ssize_t match = PyUnicode_Tailmatch(key, args[1], 0, PY_SSIZE_T_MAX, -1);
      if (match < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
      }
      if (match && !put(value, fields)) {
        Py_RETURN_NONE;
      }
    }
    return pack(fields);
  } catch (...) {
    Py_RETURN_NONE;
  }
}

// dtype(code) -> torch.dtype: the dtype object of a packed scalar type (recorder thread only).
PyObject* dtype(PyObject*, PyObject* code) {
  const long value = PyLong_AsLong(code);
  if (value == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  if (value < 0 || value >= static_cast<long>(c10::ScalarType::NumOptions)) {
    PyErr_SetString(PyExc_ValueError, "scalar type code out of range");
    return nullptr;
  }
  try {
    PyObject* out = reinterpret_cast<PyObject*>(
        torch::getTHPDtype(static_cast<c10::ScalarType>(value)));
    if (out == nullptr) {
      if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "no dtype for this scalar type code");
      }
      return nullptr;
    }
    Py_INCREF(out);
    return out;
  } catch (const std::exception& exc) {
    PyErr_SetString(PyExc_ValueError, exc.what());
    return nullptr;
  }
}

// device(type, index) -> torch.device (recorder thread only).
PyObject* device(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "device(type, index)");
    return nullptr;
  }
  const long type = PyLong_AsLong(args[0]);
  const long index = PyLong_AsLong(args[1]);
  if (PyErr_Occurred()) {
    return nullptr;
  }
  if (type < 0 || type >= static_cast<long>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES) ||
      index < -1 || index > INT8_MAX) {
    PyErr_SetString(PyExc_ValueError, "device code out of range");
    return nullptr;
  }
  try {
    return THPDevice_New(c10::Device(static_cast<c10::DeviceType>(type),
                                     static_cast<c10::DeviceIndex>(index)));
  } catch (const std::exception& exc) {
    PyErr_SetString(PyExc_ValueError, exc.what());
    return nullptr;
  }
}

PyMethodDef methods[] = {
    {"inserted", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(inserted)),
     METH_FASTCALL, "inserted(d, start) -> packed metadata of d's values from start on, or None"},
    {"prefixed", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(prefixed)),
     METH_FASTCALL, "prefixed(d, prefix) -> packed metadata of d's prefixed values, or None"},
    {"dtype", dtype, METH_O, "dtype(code) -> torch.dtype"},
    {"device", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(device)),
     METH_FASTCALL, "device(type, index) -> torch.device"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "pptrace_meta",
                      "pptrace's native tensor metadata reader", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_pptrace_meta(void) { return PyModule_Create(&module); }
