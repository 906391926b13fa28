// The file sink's templates in C: the recorder thread's per-event work for an event whose shape
// has a template (pptrace/export/file_sink.py, FileSink._raw_lines, which calls render() and
// does everything else itself).
//
// Part of the native library (pptrace/record/native.py builds and loads it with
// native_meta.cpp). Holding the GIL, this does what _raw_lines's loop does for such an event,
// about ten times faster: split the raw into its shape and the values that vary (as
// Converter.shape does, taking only the common forms), look the shape up in the sink's
// templates, draw the span's ids from the sink's counter, write the span's text from the
// template's pieces and the values, and add it to the batch's lines. It stops at the first raw
// it does not take (another form, a shape without a template, a lookup that raised) and
// returns its index: the Python loop encodes that one, and calls render() again after it.
//
// What it takes is a subset of what Converter.shape takes, so nothing is encoded here that
// Python would encode otherwise; the text is the template's, which the sink verified against
// the ordinary encoding when it made it. It calls no Python code but the sink's id counter,
// a threading.Thread's ident and name (once a call per thread object), and the hash and
// equality of the shape's own values (str, int, bytes, bool, None, the subject's type: what
// the Python lookup calls).

#include <Python.h>

#include <cstdint>
#include <cstring>

#include "native_raw.h"

namespace {

constexpr int64_t kLimit = int64_t(1) << 62;  // Converter.shape's bound on every number
constexpr int kHoles = 8;  // trace id, span id, start, end, seq, mono_ns, duration_ns, dropped

// An exact int in [0, 2**62) into out; false for anything else (no exception left set).
bool small(PyObject* o, int64_t* out) {
  if (!PyLong_CheckExact(o)) return false;
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  if (overflow || v < 0 || v >= kLimit) return false;
  *out = v;
  return true;
}

bool str_tuple(PyObject* t) {
  if (!PyTuple_CheckExact(t)) return false;
  for (Py_ssize_t i = 0, n = PyTuple_GET_SIZE(t); i < n; i++) {
    if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(t, i))) return false;
  }
  return true;
}

// Whether the current exception is an Exception (then cleared: the raw is Python's to encode);
// anything else (a BaseException) stays set, for the caller to return.
bool cleared() {
  if (!PyErr_ExceptionMatches(PyExc_Exception)) return false;
  PyErr_Clear();
  return true;
}

// Decimal digits of v into buf (at most 20), returning how many.
int decimal(uint64_t v, char* buf) {
  char tmp[20];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (int i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
  return n;
}

void hex16(uint64_t v, char* buf) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 15; i >= 0; i--) {
    buf[i] = digits[v & 15];
    v >>= 4;
  }
}

// A thread's (ident, name) as Converter.shape reads them, for one render() call: the last
// thread object's, read once (new references), or an int thread's from the flush's names.
struct Threads {
  PyObject* last = nullptr;  // the thread object read last, held (its address is the cache key)
  PyObject* ident = nullptr;
  PyObject* name = nullptr;
  PyObject* names;  // {ident: name} of the flush (Converter.threads)
  PyObject* empty;

  ~Threads() {
    Py_XDECREF(last);
    Py_XDECREF(ident);
    Py_XDECREF(name);
  }

  // 1: set (borrowed references in *ident, *name); 0: not a form taken here; -1: an error.
  int of(PyObject* thread, PyObject** id, PyObject** nm) {
    if (PyLong_CheckExact(thread)) {
      PyObject* found = PyDict_GetItemWithError(names, thread);
      if (found == nullptr && PyErr_Occurred()) return cleared() ? 0 : -1;
      if (found != nullptr && !PyUnicode_CheckExact(found)) return 0;
      *id = thread;
      *nm = found != nullptr ? found : empty;
      return 1;
    }
    if (thread != last) {
      Py_CLEAR(last);
      Py_CLEAR(ident);
      Py_CLEAR(name);
      PyObject* i = PyObject_GetAttrString(thread, "ident");
      if (i == nullptr) return cleared() ? 0 : -1;
      if (i == Py_None) {  // `thread.ident or 0`
        Py_DECREF(i);
        i = PyLong_FromLong(0);
        if (i == nullptr) return -1;
      } else if (!PyLong_CheckExact(i)) {
        Py_DECREF(i);
        return 0;
      }
      PyObject* n = PyObject_GetAttrString(thread, "name");
      if (n == nullptr) {
        Py_DECREF(i);
        return cleared() ? 0 : -1;
      }
      if (!PyUnicode_CheckExact(n)) {
        Py_DECREF(i);
        Py_DECREF(n);
        return 0;
      }
      ident = i;
      name = n;
      Py_INCREF(thread);
      last = thread;
    }
    *id = ident;
    *nm = name;
    return 1;
  }
};

// The sink's state for one render() call, read from its ctx tuple.
struct Ctx {
  PyObject* count;  // the sink's id counter: () -> int
  uint64_t prefix;
  PyObject* head;
  PyObject* tail;
  PyObject* attach;  // Direction.ATTACH, Direction.EXTRACT
  PyObject* extract;
  Py_ssize_t per_line;
};

// Whether a template (FileSink's: render, pieces, holes) is of the form written here: ASCII
// pieces, one more than the holes, each hole one of the kHoles values.
bool writable(PyObject* tmpl) {
  if (!PyTuple_CheckExact(tmpl) || PyTuple_GET_SIZE(tmpl) != 3) return false;
  PyObject* parts = PyTuple_GET_ITEM(tmpl, 1);
  PyObject* order = PyTuple_GET_ITEM(tmpl, 2);
  if (!PyTuple_CheckExact(parts) || !PyBytes_CheckExact(order)) return false;
  Py_ssize_t holes = PyBytes_GET_SIZE(order);
  if (PyTuple_GET_SIZE(parts) != holes + 1 || holes > 16) return false;
  const unsigned char* at = reinterpret_cast<const unsigned char*>(PyBytes_AS_STRING(order));
  for (Py_ssize_t i = 0; i < holes; i++) {
    if (at[i] >= kHoles) return false;
  }
  for (Py_ssize_t i = 0; i <= holes; i++) {
    PyObject* part = PyTuple_GET_ITEM(parts, i);
    if (!PyUnicode_CheckExact(part) || !PyUnicode_IS_COMPACT_ASCII(part)) return false;
  }
  return true;
}

// A writable template's text with the values in its holes: a new str (nullptr: no memory).
PyObject* fill(PyObject* tmpl, const uint64_t values[kHoles], uint64_t prefix) {
  PyObject* parts = PyTuple_GET_ITEM(tmpl, 1);
  PyObject* order = PyTuple_GET_ITEM(tmpl, 2);
  Py_ssize_t holes = PyBytes_GET_SIZE(order);
  const unsigned char* at = reinterpret_cast<const unsigned char*>(PyBytes_AS_STRING(order));
  char text[16][32];
  int lens[16];
  Py_ssize_t total = 0;
  for (Py_ssize_t i = 0; i < holes; i++) {
    int hole = at[i];
    if (hole == 0) {  // the trace id: the prefix, then the counter's 64 bits
      hex16(prefix, text[i]);
      hex16(values[0], text[i] + 16);
      lens[i] = 32;
    } else if (hole == 1) {
      hex16(values[1], text[i]);
      lens[i] = 16;
    } else {
      lens[i] = decimal(values[hole], text[i]);
    }
    total += lens[i];
  }
  for (Py_ssize_t i = 0; i <= holes; i++) {
    total += PyUnicode_GET_LENGTH(PyTuple_GET_ITEM(parts, i));
  }
  PyObject* out = PyUnicode_New(total, 127);
  if (out == nullptr) return nullptr;
  char* w = reinterpret_cast<char*>(PyUnicode_1BYTE_DATA(out));
  for (Py_ssize_t i = 0; i <= holes; i++) {
    PyObject* part = PyTuple_GET_ITEM(parts, i);
    Py_ssize_t n = PyUnicode_GET_LENGTH(part);
    std::memcpy(w, PyUnicode_1BYTE_DATA(part), n);
    w += n;
    if (i < holes) {
      std::memcpy(w, text[i], lens[i]);
      w += lens[i];
    }
  }
  return out;
}

// The span of raw as its template writes it: a new str; nullptr and no exception when raw is
// not taken here; nullptr with an exception set on an error to raise.
PyObject* span_of(PyObject* raw, PyObject* templates, Ctx& ctx, Threads& threads) {
  if (!PyTuple_CheckExact(raw) || PyTuple_GET_SIZE(raw) != kRawLen) return nullptr;
  PyObject** f = &PyTuple_GET_ITEM(raw, 0);
  PyObject* attach;
  if (f[kDirection] == ctx.attach) {
    attach = Py_True;
  } else if (f[kDirection] == ctx.extract) {
    attach = Py_False;
  } else {
    return nullptr;
  }
  if (f[kFingerprints] != Py_None || f[kError] != Py_None) return nullptr;
  if (f[kReturnedNone] != Py_True && f[kReturnedNone] != Py_False) return nullptr;
  int64_t seq, wall, mono, dur, dropped;
  if (!small(f[kSeq], &seq) || !small(f[kWallNs], &wall) || !small(f[kMonoNs], &mono) ||
      !small(f[kDurationNs], &dur) || !small(f[kDropped], &dropped)) {
    return nullptr;
  }
  if (!str_tuple(f[kKeysBefore]) || !str_tuple(f[kKeysAfter])) return nullptr;
  PyObject* items = f[kItems];
  if (PyBytes_CheckExact(items)) {  // packed by the native reader
    Py_INCREF(items);
  } else if (PyList_CheckExact(items)) {  // the Python wrappers' flat form: a key every fifth
    for (Py_ssize_t i = 0, n = PyList_GET_SIZE(items); i < n; i += 5) {
      if (!PyUnicode_CheckExact(PyList_GET_ITEM(items, i))) return nullptr;
    }
    items = PyList_AsTuple(items);
    if (items == nullptr) return nullptr;
  } else {
    return nullptr;
  }
  PyObject *ident, *name;
  int got = threads.of(f[kThread], &ident, &name);
  if (got <= 0) {
    Py_DECREF(items);
    return nullptr;
  }
  // Converter.shape's key, and _raw_lines's (the key, whether the count of drops is not 0).
  PyObject* key = PyTuple_Pack(9, attach, ident, name, f[kSubject], f[kKeysBefore],
                               f[kKeysAfter], items, f[kReturnedNone], Py_None);
  Py_DECREF(items);
  if (key == nullptr) return nullptr;
  PyObject* both = PyTuple_Pack(2, key, dropped != 0 ? Py_True : Py_False);
  Py_DECREF(key);
  if (both == nullptr) return nullptr;
  PyObject* tmpl = PyDict_GetItemWithError(templates, both);
  Py_XINCREF(tmpl);  // the lookup may have run a subject type's own __eq__
  Py_DECREF(both);
  if (tmpl == nullptr) {
    if (PyErr_Occurred()) cleared();
    return nullptr;
  }
  if (!writable(tmpl)) {  // (non-ASCII pieces): Python's, before any id is drawn
    Py_DECREF(tmpl);
    return nullptr;
  }
  // The ids, as FileSink._ids draws them: trace = prefix << 64 | n, span = (prefix + n) or 1.
  PyObject* n = PyObject_CallNoArgs(ctx.count);
  if (n == nullptr) {
    Py_DECREF(tmpl);
    return nullptr;
  }
  uint64_t low = PyLong_AsUnsignedLongLongMask(n);
  Py_DECREF(n);
  if (low == static_cast<uint64_t>(-1) && PyErr_Occurred()) {
    Py_DECREF(tmpl);
    return nullptr;
  }
  uint64_t span = ctx.prefix + low;
  const uint64_t values[kHoles] = {
      low, span != 0 ? span : 1, static_cast<uint64_t>(wall), static_cast<uint64_t>(wall + dur),
      static_cast<uint64_t>(seq), static_cast<uint64_t>(mono), static_cast<uint64_t>(dur),
      static_cast<uint64_t>(dropped)};
  PyObject* text = fill(tmpl, values, ctx.prefix);
  Py_DECREF(tmpl);
  return text;
}

}  // namespace

// render(raws, start, templates, ctx, pieces, lines, count) -> (next, count, moved)
//
// From raws[start], each raw whose shape has a writable template in `templates` ({(key, drops):
// (render, parts, order)}: FileSink's own) is written as FileSink._raw_lines writes it: "," before all but a line's
// first span, and once a line holds ctx's per_line spans, its tail, joined into `lines`, then a
// new line from its head in `pieces` (cleared in place). `ctx`: (count, prefix, head, tail,
// threads, attach, extract, per_line). Returns the index of the first raw not written here
// (len(raws) when all were), the spans in the open line, and the spans moved into `lines`.
extern "C" PyObject* pptrace_render(PyObject* /*module*/, PyObject* const* args,
                                    Py_ssize_t nargs) {
  if (nargs != 7 || !PyList_CheckExact(args[0]) || !PyDict_CheckExact(args[2]) ||
      !PyTuple_CheckExact(args[3]) || PyTuple_GET_SIZE(args[3]) != 8 ||
      !PyList_CheckExact(args[4]) || !PyList_CheckExact(args[5])) {
    PyErr_SetString(PyExc_TypeError,
                    "render(raws: list, start, templates: dict, ctx: tuple of 8, pieces: list, "
                    "lines: list, count)");
    return nullptr;
  }
  PyObject *raws = args[0], *templates = args[2], *pieces = args[4], *lines = args[5];
  Py_ssize_t at = PyLong_AsSsize_t(args[1]);
  Py_ssize_t count = PyLong_AsSsize_t(args[6]);
  if ((at == -1 || count == -1) && PyErr_Occurred()) return nullptr;
  PyObject* c = args[3];
  Ctx ctx;
  ctx.count = PyTuple_GET_ITEM(c, 0);
  ctx.prefix = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(c, 1));
  if (ctx.prefix == static_cast<uint64_t>(-1) && PyErr_Occurred()) return nullptr;
  ctx.head = PyTuple_GET_ITEM(c, 2);
  ctx.tail = PyTuple_GET_ITEM(c, 3);
  ctx.attach = PyTuple_GET_ITEM(c, 5);
  ctx.extract = PyTuple_GET_ITEM(c, 6);
  ctx.per_line = PyLong_AsSsize_t(PyTuple_GET_ITEM(c, 7));
  if (ctx.per_line == -1 && PyErr_Occurred()) return nullptr;
  if (!PyDict_CheckExact(PyTuple_GET_ITEM(c, 4)) || ctx.per_line < 1 || at < 0 || count < 0) {
    PyErr_SetString(PyExc_ValueError, "render: a ctx or index out of its range");
    return nullptr;
  }
  PyObject* empty = PyUnicode_New(0, 0);
  PyObject* comma = PyUnicode_FromStringAndSize(",", 1);
  if (empty == nullptr || comma == nullptr) {
    Py_XDECREF(empty);
    Py_XDECREF(comma);
    return nullptr;
  }
  Py_ssize_t moved = 0;
  bool failed = false;
  {
    Threads threads;
    threads.names = PyTuple_GET_ITEM(c, 4);
    threads.empty = empty;
    // The list may change under us only through Python code (the counter, a thread's name):
    // its length is read again each time round.
    for (; at < PyList_GET_SIZE(raws); at++) {
      PyObject* raw = PyList_GET_ITEM(raws, at);
      Py_INCREF(raw);
      PyObject* text = span_of(raw, templates, ctx, threads);
      Py_DECREF(raw);
      if (text == nullptr) {
        failed = PyErr_Occurred() != nullptr;
        break;
      }
      if (count == ctx.per_line) {
        PyObject* line = nullptr;
        failed = PyList_Append(pieces, ctx.tail) < 0 ||
                 (line = PyUnicode_Join(empty, pieces)) == nullptr ||
                 PyList_Append(lines, line) < 0 ||
                 PyList_SetSlice(pieces, 0, PyList_GET_SIZE(pieces), nullptr) < 0 ||
                 PyList_Append(pieces, ctx.head) < 0;
        Py_XDECREF(line);
        moved += count;
        count = 0;
      } else if (count != 0) {
        failed = PyList_Append(pieces, comma) < 0;
      }
      failed = failed || PyList_Append(pieces, text) < 0;
      Py_DECREF(text);
      if (failed) break;
      count++;
    }
  }
  Py_DECREF(empty);
  Py_DECREF(comma);
  if (failed) return nullptr;
  return Py_BuildValue("nnn", at, count, moved);
}
