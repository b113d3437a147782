//===- Errors.h - raise partita.Error from the extension modules -*- C++ -*-===//
//
// Both extension modules report failures as the one Python class
// partita.Error (python-bindings/partita/_error.py), with the located
// diagnostics that led to it. C++ errors are caught in the binding's own
// frames and turned into a Python exception there, with the GIL held: no
// C++ exception crosses an MLIR frame or the Python boundary.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PYTHON_BINDINGS_ERRORS_H
#define PARTITA_PYTHON_BINDINGS_ERRORS_H

#include <nanobind/nanobind.h>

#include <string>
#include <vector>

namespace partita::python {

/// One diagnostic as Python sees it (partita.Diagnostic).
struct DiagnosticRecord {
  std::string severity; // "error", "warning", "note", "remark"
  std::string location; // "file:line:col", a NameLoc's name, or empty
  std::string message;
};

/// Raises partita.Error(message, diagnostics). Call with the GIL held.
[[noreturn]] inline void
raiseError(const std::string &message,
           const std::vector<DiagnosticRecord> &diagnostics = {}) {
  namespace nb = nanobind;
  nb::module_ errors = nb::module_::import_("partita._error");
  nb::list records;
  for (const DiagnosticRecord &d : diagnostics)
    records.append(errors.attr("Diagnostic")(d.severity, d.location,
                                             d.message));
  nb::object error = errors.attr("Error")(message, records);
  PyErr_SetObject(error.type().ptr(), error.ptr());
  throw nb::python_error();
}

} // namespace partita::python

#endif // PARTITA_PYTHON_BINDINGS_ERRORS_H
