// pptrace's optional native metadata reader (see pptrace/record/native.py, which builds and
// loads it).
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

#include <time.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "native_raw.h"

// The file sink's templates in C (native_render.cpp, compiled into the same library).
extern "C" PyObject* pptrace_render(PyObject* module, PyObject* const* args, Py_ssize_t nargs);

namespace {

// Appends one tensor's fields; false when this reader must leave the value to Python.
// int64 fields on the stack for the usual few tensors, on the heap beyond.
class Fields {
 public:
  void push_back(int64_t v) {
    if (n_ < kStack) {
      stack_[n_++] = v;
      return;
    }
    if (heap_.empty()) heap_.assign(stack_, stack_ + n_);
    heap_.push_back(v);
    n_++;
  }
  const int64_t* data() const { return heap_.empty() ? stack_ : heap_.data(); }
  size_t size() const { return n_; }

 private:
  static constexpr size_t kStack = 128;
  int64_t stack_[kStack];
  size_t n_ = 0;
  std::vector<int64_t> heap_;
};

bool put(PyObject* value, Fields& out) {
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

PyObject* pack(const Fields& fields) {
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
    Fields fields;
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
    Fields fields;
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

// ---------------------------------------------------------------------------------------------
// Hot: the wrappers' common case as one C callable (see pptrace/record/wrapper.py, which makes
// it).
//
// A call with two positional arguments, an exact dict and the recorder enabled is recorded
// here: keys before, clocks, the engine's function, keys after, the packed tensors, and one raw
// tuple appended to the recorder's buffer (the very tuple the Python wrapper appends: see
// pptrace/model/raw.py). Every other call goes to ``slow``, the Python wrapper itself, before
// the engine's function runs; once the recorder is disabled (after its shutdown) every call goes
// straight to ``fn``. An exception from the engine's function goes to ``on_error`` (Python), then
// is re-raised: the very same object. ``on_items`` (Python) reads an attach's values the reader
// leaves to Python. A failure in recording after the engine's function returned goes to
// ``internal_error`` and never reaches the caller.
//
// The recorder's members are reached without names of their own here: the three attributes read
// on each call are named by ``reads`` (pptrace.record.recorder.HOT_READS), its methods come as
// bound methods.

// The raw record's fields, by position (native_raw.h): the module exports their names at these
// positions as RAW_FIELDS.
struct FieldName {
  RawField field;
  const char* name;
};

constexpr FieldName kRawFields[] = {
    {kDirection, "direction"},     {kSeq, "seq"},
    {kWallNs, "wall_ns"},          {kMonoNs, "mono_ns"},
    {kDurationNs, "duration_ns"},  {kThread, "thread"},
    {kSubject, "subject"},         {kKeysBefore, "keys_before"},
    {kKeysAfter, "keys_after"},    {kItems, "items"},
    {kReturnedNone, "returned_none"}, {kError, "error"},
    {kDropped, "dropped"},         {kFingerprints, "fingerprints"},
};
static_assert(sizeof(kRawFields) / sizeof(kRawFields[0]) == kRawLen,
              "every raw field has a name");

struct FieldValue {
  RawField field;
  PyObject* value;
};

// RAW_FIELDS: the names at their positions (a new reference, or nullptr).
PyObject* raw_fields() {
  PyObject* out = PyTuple_New(kRawLen);
  if (out == nullptr) return nullptr;
  for (const FieldName& f : kRawFields) {
    PyObject* name = PyUnicode_FromString(f.name);
    if (name == nullptr || PyTuple_GET_ITEM(out, f.field) != nullptr) {
      Py_XDECREF(name);
      Py_DECREF(out);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "a raw field named twice");
      return nullptr;
    }
    PyTuple_SET_ITEM(out, f.field, name);
  }
  return out;
}

struct Hot {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* dict;
  PyObject* fn;
  PyObject* slow;
  PyObject* rec;
  PyObject* direction;
  PyObject* seq;
  PyObject* buf;
  PyObject* append;
  PyObject* prefix;  // extract: the prefix; attach: None
  PyObject* on_error;
  PyObject* on_items;
  PyObject* thread;  // () -> the calling threading.Thread
  PyObject* enabled;  // the names of rec's attributes: is it recording,
  PyObject* rank_pending;  // is its rank still to be learned,
  PyObject* dropped;  // events dropped so far (a str each)
  PyObject* drop_new;  // rec's bound methods
  PyObject* internal_error;
  PyObject* learn_rank;
  Py_ssize_t cap;
  int ring;
};

PyObject* s_record_where = nullptr;
PyObject* s_thread_key = nullptr;

int64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

PyObject* keys_of(PyObject* d) {
  PyObject* out = PyTuple_New(PyDict_GET_SIZE(d));
  if (out == nullptr) return nullptr;
  Py_ssize_t pos = 0, i = 0;
  PyObject *k, *v;
  while (PyDict_Next(d, &pos, &k, &v)) {
    if (i >= PyTuple_GET_SIZE(out)) break;  // cannot happen without Python code running
    Py_INCREF(k);
    PyTuple_SET_ITEM(out, i++, k);
  }
  if (i != PyTuple_GET_SIZE(out)) {
    Py_DECREF(out);
    PyErr_SetString(PyExc_RuntimeError, "dict changed size while its keys were read");
    return nullptr;
  }
  return out;
}

// rec.<flag> as a bool; -1 when it cannot be read (the caller then takes the slow path).
int flag(PyObject* rec, PyObject* name) {
  PyObject* v = PyObject_GetAttr(rec, name);
  if (v == nullptr) {
    PyErr_Clear();
    return -1;
  }
  int out = PyObject_IsTrue(v);
  Py_DECREF(v);
  if (out < 0) PyErr_Clear();
  return out;
}

// The current exception goes to rec.internal_error("<direction> record", exc); nothing raised.
void internal_error(Hot* self) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value != nullptr) {
    PyObject* r = PyObject_CallFunctionObjArgs(self->internal_error, s_record_where, value,
                                               nullptr);
    if (r == nullptr) PyErr_Clear();
    Py_XDECREF(r);
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
}

// The calling threading.Thread, kept in the thread state's own dict (gone with the thread)
// after the first call on each thread; new reference, or nullptr with an exception set.
PyObject* calling_thread(Hot* self) {
  PyObject* state = PyThreadState_GetDict();
  if (state != nullptr) {
    PyObject* found = PyDict_GetItemWithError(state, s_thread_key);
    if (found != nullptr) {
      Py_INCREF(found);
      return found;
    }
    if (PyErr_Occurred()) return nullptr;
  }
  PyObject* current = PyObject_CallNoArgs(self->thread);
  if (current != nullptr && state != nullptr && PyDict_SetItem(state, s_thread_key, current) < 0) {
    PyErr_Clear();  // not kept: asked again next time
  }
  return current;
}

PyObject* call_slow(Hot* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

PyObject* hot_call(PyObject* obj, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Hot* self = reinterpret_cast<Hot*>(obj);
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs != 2 || kwnames != nullptr || !PyDict_CheckExact(args[0])) {
    return call_slow(self, args, nargsf, kwnames);
  }
  const int enabled = flag(self->rec, self->enabled);
  if (enabled == 0) return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
  if (enabled < 0) return call_slow(self, args, nargsf, kwnames);
  PyObject* tensors = args[0];
  PyObject* subject = args[1];
  const bool attach = self->prefix == Py_None;
  PyObject* items = nullptr;  // extract: read before the call
  if (!attach) {
    PyObject* pargs[2] = {tensors, self->prefix};
    items = prefixed(nullptr, pargs, 2);
    if (items == nullptr) {
      PyErr_Clear();
      return call_slow(self, args, nargsf, kwnames);
    }
    if (items == Py_None) {  // a value the reader leaves to Python: the whole call is Python's
      Py_DECREF(items);
      return call_slow(self, args, nargsf, kwnames);
    }
  }
  PyObject* before = keys_of(tensors);
  if (before == nullptr) {
    Py_XDECREF(items);
    PyErr_Clear();
    return call_slow(self, args, nargsf, kwnames);
  }
  const int64_t wall = now_ns(CLOCK_REALTIME);
  const int64_t t0 = now_ns(CLOCK_MONOTONIC);
  PyObject* result = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
  const int64_t dur = now_ns(CLOCK_MONOTONIC) - t0;
  if (result == nullptr) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != nullptr && tb != nullptr) PyException_SetTraceback(value, tb);
    PyObject* r = PyObject_CallFunction(self->on_error, "OOOLLLOO", tensors, subject, before,
                                        static_cast<long long>(wall), static_cast<long long>(t0),
                                        static_cast<long long>(dur), items ? items : Py_None,
                                        value ? value : Py_None);
    if (r == nullptr) PyErr_Clear();  // on_error counts its own failures; never replace exc
    Py_XDECREF(r);
    Py_DECREF(before);
    Py_XDECREF(items);
    PyErr_Restore(type, value, tb);
    return nullptr;
  }
  PyObject* after = nullptr;
  PyObject* seq = nullptr;
  PyObject* dropped = nullptr;
  PyObject* raw = nullptr;
  bool ok = false;
  do {
    after = keys_of(tensors);
    if (after == nullptr) break;
    if (attach) {
      PyObject* start = PyLong_FromSsize_t(PyTuple_GET_SIZE(before));
      if (start == nullptr) break;
      PyObject* iargs[2] = {tensors, start};
      items = inserted(nullptr, iargs, 2);
      if (items == Py_None) {
        Py_DECREF(items);
        items = PyObject_CallFunctionObjArgs(self->on_items, tensors, start, nullptr);
      }
      Py_DECREF(start);
      if (items == nullptr) break;
    }
    seq = PyIter_Next(self->seq);
    if (seq == nullptr) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "sequence ended");
      break;
    }
    dropped = PyObject_GetAttr(self->rec, self->dropped);
    if (dropped == nullptr) break;
    PyObject* current = calling_thread(self);
    PyObject* ints[4] = {PyLong_FromLongLong(wall), PyLong_FromLongLong(t0),
                         PyLong_FromLongLong(dur), current};
    if (!ints[0] || !ints[1] || !ints[2] || !ints[3]) {
      for (PyObject* i : ints) Py_XDECREF(i);
      break;
    }
    raw = PyTuple_New(kRawLen);
    if (raw == nullptr) {
      for (PyObject* i : ints) Py_DECREF(i);
      break;
    }
    // The same fields as the Python wrapper's raw, each at its named position.
    // New references (three ints, the Thread) move into the tuple; the rest are borrowed.
    PyTuple_SET_ITEM(raw, kWallNs, ints[0]);
    PyTuple_SET_ITEM(raw, kMonoNs, ints[1]);
    PyTuple_SET_ITEM(raw, kDurationNs, ints[2]);
    PyTuple_SET_ITEM(raw, kThread, ints[3]);
    const FieldValue borrowed[] = {
        {kDirection, self->direction},
        {kSeq, seq},
        {kSubject, reinterpret_cast<PyObject*>(Py_TYPE(subject))},
        {kKeysBefore, before},
        {kKeysAfter, after},
        {kItems, items},
        {kReturnedNone, result == Py_None ? Py_True : Py_False},
        {kError, Py_None},
        {kDropped, dropped},
        {kFingerprints, Py_None}};
    static_assert(sizeof(borrowed) / sizeof(borrowed[0]) + 4 == kRawLen,
                  "the hot wrapper sets every raw field");
    for (const FieldValue& f : borrowed) {
      Py_INCREF(f.value);
      PyTuple_SET_ITEM(raw, f.field, f.value);
    }
    // Shutdown may have begun while the engine's function ran: then the final counts are made
    // (or being made) without this call, and a raw appended now would stay in the buffer,
    // neither written nor counted. Nothing from this check to the append runs Python code, so
    // no other thread runs between them (the seq taken above is then counted, or not, by the
    // final count itself: recorded is read from the sequence counters).
    if (flag(self->rec, self->enabled) == 0) {
      ok = true;
      break;
    }
    if (self->ring || PyObject_Size(self->buf) < self->cap) {
      PyObject* r = PyObject_CallOneArg(self->append, raw);
      if (r == nullptr) break;
      Py_DECREF(r);
    } else {
      PyObject* r = PyObject_CallNoArgs(self->drop_new);
      if (r == nullptr) break;
      Py_DECREF(r);
    }
    const int pending = flag(self->rec, self->rank_pending);  // the first calls only
    if (pending != 0) {
      PyObject* r = PyObject_CallNoArgs(self->learn_rank);
      if (r == nullptr) break;
      Py_DECREF(r);
    }
    ok = true;
  } while (false);
  if (!ok) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "recording failed");
    internal_error(self);
  }
  Py_XDECREF(raw);
  Py_XDECREF(dropped);
  Py_XDECREF(seq);
  Py_XDECREF(after);
  Py_XDECREF(items);
  Py_DECREF(before);
  return result;
}

int hot_traverse(PyObject* obj, visitproc visit, void* arg) {
  Hot* self = reinterpret_cast<Hot*>(obj);
  Py_VISIT(self->dict);
  Py_VISIT(self->fn);
  Py_VISIT(self->slow);
  Py_VISIT(self->rec);
  Py_VISIT(self->direction);
  Py_VISIT(self->seq);
  Py_VISIT(self->buf);
  Py_VISIT(self->append);
  Py_VISIT(self->prefix);
  Py_VISIT(self->on_error);
  Py_VISIT(self->on_items);
  Py_VISIT(self->thread);
  Py_VISIT(self->enabled);
  Py_VISIT(self->rank_pending);
  Py_VISIT(self->dropped);
  Py_VISIT(self->drop_new);
  Py_VISIT(self->internal_error);
  Py_VISIT(self->learn_rank);
  return 0;
}

int hot_clear(PyObject* obj) {
  Hot* self = reinterpret_cast<Hot*>(obj);
  Py_CLEAR(self->dict);
  Py_CLEAR(self->fn);
  Py_CLEAR(self->slow);
  Py_CLEAR(self->rec);
  Py_CLEAR(self->direction);
  Py_CLEAR(self->seq);
  Py_CLEAR(self->buf);
  Py_CLEAR(self->append);
  Py_CLEAR(self->prefix);
  Py_CLEAR(self->on_error);
  Py_CLEAR(self->on_items);
  Py_CLEAR(self->thread);
  Py_CLEAR(self->enabled);
  Py_CLEAR(self->rank_pending);
  Py_CLEAR(self->dropped);
  Py_CLEAR(self->drop_new);
  Py_CLEAR(self->internal_error);
  Py_CLEAR(self->learn_rank);
  return 0;
}

void hot_dealloc(PyObject* obj) {
  PyObject_GC_UnTrack(obj);
  hot_clear(obj);
  Py_TYPE(obj)->tp_free(obj);
}

// Bound like a function when it is a class attribute (as the Python wrapper would be).
PyObject* hot_get(PyObject* self, PyObject* obj, PyObject*) {
  if (obj == nullptr || obj == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, obj);
}

PyGetSetDef hot_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyTypeObject HotType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// hot(*, fn, slow, rec, reads, direction, seq, buf, append, cap, ring, prefix, on_error,
//     on_items, thread, drop_new, internal_error, learn_rank): keyword arguments only.
PyObject* make_hot(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* names[] = {"fn",       "slow",     "rec",      "reads",          "direction",
                                "seq",      "buf",      "append",   "cap",            "ring",
                                "prefix",   "on_error", "on_items", "thread",         "drop_new",
                                "internal_error", "learn_rank", nullptr};
  PyObject *fn, *slow, *rec, *direction, *seq, *buf, *append, *prefix, *on_error, *on_items,
      *thread, *drop_new, *internal_error, *learn_rank;
  PyObject *enabled, *rank_pending, *dropped;
  Py_ssize_t cap;
  int ring;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOO(UUU)OOOOnpOOOOOOO",
                                   const_cast<char**>(names), &fn, &slow, &rec, &enabled,
                                   &rank_pending, &dropped, &direction, &seq, &buf, &append, &cap,
                                   &ring, &prefix, &on_error, &on_items, &thread, &drop_new,
                                   &internal_error, &learn_rank)) {
    return nullptr;
  }
  if (PyTuple_GET_SIZE(args) != 0 || kwargs == nullptr ||
      PyDict_GET_SIZE(kwargs) != static_cast<Py_ssize_t>(sizeof(names) / sizeof(*names) - 1)) {
    PyErr_SetString(PyExc_TypeError, "hot() takes every argument, by keyword");
    return nullptr;
  }
  if (prefix != Py_None && !PyUnicode_CheckExact(prefix)) {
    PyErr_SetString(PyExc_TypeError, "prefix must be a str or None");
    return nullptr;
  }
  Hot* self = PyObject_GC_New(Hot, &HotType);
  if (self == nullptr) return nullptr;
  self->vectorcall = hot_call;
  self->dict = PyDict_New();
  PyObject* objs[] = {fn,     slow,     rec,      direction, seq,          buf,
                      append, prefix,   on_error, on_items,  thread,       enabled,
                      rank_pending, dropped, drop_new, internal_error, learn_rank};
  for (PyObject* o : objs) Py_INCREF(o);
  self->fn = fn;
  self->slow = slow;
  self->rec = rec;
  self->direction = direction;
  self->seq = seq;
  self->buf = buf;
  self->append = append;
  self->prefix = prefix;
  self->on_error = on_error;
  self->on_items = on_items;
  self->thread = thread;
  self->enabled = enabled;
  self->rank_pending = rank_pending;
  self->dropped = dropped;
  self->drop_new = drop_new;
  self->internal_error = internal_error;
  self->learn_rank = learn_rank;
  self->cap = cap;
  self->ring = ring;
  PyObject_GC_Track(reinterpret_cast<PyObject*>(self));
  if (self->dict == nullptr) {
    Py_DECREF(self);
    return nullptr;
  }
  return reinterpret_cast<PyObject*>(self);
}

PyMethodDef methods[] = {
    {"render", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(pptrace_render)),
     METH_FASTCALL,
     "render(raws, start, templates, ctx, pieces, lines, count) -> (next, count, moved): "
     "the file sink's templated spans (native_render.cpp)"},
    {"hot", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(make_hot)),
     METH_VARARGS | METH_KEYWORDS,
     "hot(*, fn, slow, rec, reads, direction, seq, buf, append, cap, ring, prefix, on_error, "
     "on_items, thread, drop_new, internal_error, learn_rank)"},
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

PyMODINIT_FUNC PyInit_pptrace_meta(void) {
  HotType.tp_name = "pptrace_meta.Hot";
  HotType.tp_doc = "pptrace's wrapper of an attach or extract function (its common case in C)";
  HotType.tp_basicsize = sizeof(Hot);
  HotType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                     Py_TPFLAGS_METHOD_DESCRIPTOR;
  HotType.tp_vectorcall_offset = offsetof(Hot, vectorcall);
  HotType.tp_call = PyVectorcall_Call;
  HotType.tp_dictoffset = offsetof(Hot, dict);
  HotType.tp_traverse = hot_traverse;
  HotType.tp_clear = hot_clear;
  HotType.tp_dealloc = hot_dealloc;
  HotType.tp_descr_get = hot_get;
  HotType.tp_getset = hot_getset;
  if (PyType_Ready(&HotType) < 0) return nullptr;
  s_record_where = PyUnicode_InternFromString("native record");
  s_thread_key = PyUnicode_InternFromString("pptrace.calling_thread");
  if (!s_record_where || !s_thread_key) {
    return nullptr;
  }
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) return nullptr;
  PyObject* fields = raw_fields();
  if (fields == nullptr || PyModule_AddObject(m, "RAW_FIELDS", fields) < 0) {
    Py_XDECREF(fields);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
