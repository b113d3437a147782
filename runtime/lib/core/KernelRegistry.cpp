//===- KernelRegistry.cpp - custom kernels by name ------------------------===//
//
// One process-wide table, guarded by a mutex: kernels are registered before
// plans load and looked up when an executor is built and when a custom
// kernel runs (a map lookup, small next to the kernel). Entries are never
// removed, so a pointer to one stays valid. Also CustomAttrs' getters.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/KernelRegistry.h"

#include <dlfcn.h>

#include <map>
#include <mutex>
#include <utility>

namespace partita::runtime {

namespace {
struct Registry {
  std::mutex mutex;
  // (backend, name) -> kernel.
  std::map<std::pair<std::string, std::string>, CustomKernel> kernels;
};

Registry &registry() {
  static Registry *r = new Registry; // never destroyed: outlives every user
  return *r;
}

const char *kindName(const AttrValue &value) {
  static const char *const names[] = {"int", "float", "bool", "string",
                                      "int list"};
  return names[value.index()];
}
} // namespace

void registerKernel(const std::string &backend, const std::string &name,
                    CustomKernel kernel) {
  if (name.empty())
    throw Error("cannot register a kernel with an empty name");
  if (!kernel)
    throw Error("kernel '" + name + "': registered with no function");
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.kernels.emplace(std::make_pair(backend, name), std::move(kernel))
           .second)
    throw Error("kernel '" + name + "' is already registered for the " +
                backend + " backend");
}

const CustomKernel *findKernel(const std::string &backend,
                               const std::string &name) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.kernels.find(std::make_pair(backend, name));
  return it == r.kernels.end() ? nullptr : &it->second;
}

std::vector<std::string> registeredKernels(const std::string &backend) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto &entry : r.kernels)
    if (entry.first.first == backend)
      names.push_back(entry.first.second);
  return names;
}

void loadKernelLibrary(const std::string &path) {
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    throw Error("kernel library " + path + ": cannot be loaded: " +
                (why ? why : "unknown error"));
  }
  using EntryPoint = void (*)();
  auto entry =
      reinterpret_cast<EntryPoint>(dlsym(handle, kKernelLibraryEntryPoint));
  if (!entry)
    throw Error("kernel library " + path + " has no function " +
                kKernelLibraryEntryPoint + " (see KernelRegistry.h)");
  try {
    entry();
  } catch (const std::exception &e) {
    throw Error("kernel library " + path + ": " + e.what());
  }
}

//===----------------------------------------------------------------------===//
// CustomAttrs
//===----------------------------------------------------------------------===//

void CustomAttrs::set(const std::string &name, AttrValue value) {
  byName[name] = std::move(value);
}

bool CustomAttrs::has(const std::string &name) const {
  return byName.count(name) != 0;
}

const AttrValue &CustomAttrs::get(const std::string &name,
                                  const char *kind) const {
  auto it = byName.find(name);
  if (it == byName.end())
    throw Error("kernel attribute '" + name + "' (" + kind + ") is missing");
  return it->second;
}

namespace {
[[noreturn]] void wrongKind(const std::string &name, const AttrValue &value,
                            const char *kind) {
  throw Error("kernel attribute '" + name + "' is " + kindName(value) +
              ", expected " + kind);
}
} // namespace

int64_t CustomAttrs::getInt(const std::string &name) const {
  const AttrValue &v = get(name, "int");
  if (auto *i = std::get_if<int64_t>(&v))
    return *i;
  wrongKind(name, v, "int");
}

int64_t CustomAttrs::getInt(const std::string &name,
                            int64_t defaultValue) const {
  return has(name) ? getInt(name) : defaultValue;
}

double CustomAttrs::getFloat(const std::string &name) const {
  const AttrValue &v = get(name, "float");
  if (auto *f = std::get_if<double>(&v))
    return *f;
  if (auto *i = std::get_if<int64_t>(&v))
    return double(*i);
  wrongKind(name, v, "float");
}

double CustomAttrs::getFloat(const std::string &name,
                             double defaultValue) const {
  return has(name) ? getFloat(name) : defaultValue;
}

bool CustomAttrs::getBool(const std::string &name) const {
  const AttrValue &v = get(name, "bool");
  if (auto *b = std::get_if<bool>(&v))
    return *b;
  wrongKind(name, v, "bool");
}

bool CustomAttrs::getBool(const std::string &name, bool defaultValue) const {
  return has(name) ? getBool(name) : defaultValue;
}

const std::string &CustomAttrs::getString(const std::string &name) const {
  const AttrValue &v = get(name, "string");
  if (auto *s = std::get_if<std::string>(&v))
    return *s;
  wrongKind(name, v, "string");
}

const std::vector<int64_t> &
CustomAttrs::getInts(const std::string &name) const {
  const AttrValue &v = get(name, "int list");
  if (auto *l = std::get_if<std::vector<int64_t>>(&v))
    return *l;
  wrongKind(name, v, "int list");
}

} // namespace partita::runtime
