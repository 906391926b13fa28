// The raw record's fields, by position: pptrace/model/raw.py's RAW_FIELDS. Shared by the
// library's sources (native_meta.cpp builds raws and exports their names as RAW_FIELDS;
// native_render.cpp reads them); pptrace.record.native refuses a library whose layout differs
// from Python's, and its self-test renders a raw of Python's layout.

#ifndef PPTRACE_NATIVE_RAW_H
#define PPTRACE_NATIVE_RAW_H

#include <Python.h>

enum RawField : Py_ssize_t {
  kDirection,
  kSeq,
  kWallNs,
  kMonoNs,
  kDurationNs,
  kThread,
  kSubject,
  kKeysBefore,
  kKeysAfter,
  kItems,
  kReturnedNone,
  kError,
  kDropped,
  kFingerprints,
  kRawLen
};

#endif  // PPTRACE_NATIVE_RAW_H
