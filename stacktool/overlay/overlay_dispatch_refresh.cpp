// Part of the overlay build's core library (stacktool/overlay/); called by the loader
// right after it loads the library.
//
// Why: in v2.6.0, c10::getRuntimeDispatchKeySet() has no case for the alias key
// FuncTorchBatchedDecomposition, so registering a kernel to it (OP_DECOMPOSE in
// aten/src/ATen/functorch/BatchRulesDecompositions.cpp) does not refresh the op's
// FuncTorchBatched dispatch-table entry. In a full build that goes unnoticed: libtorch
// registers the FuncTorchBatched fallback later in its own static initialization, which
// recomputes that entry for every op. The overlay registers after libtorch, so the entry
// keeps the boxed for-loop fallback computed when the op was created, and vmap never
// reaches the decomposition ("aten::attn hit the vmap fallback").
//
// Registering and at once deregistering a fallthrough kernel for FuncTorchBatched makes
// the dispatcher recompute that entry, which then finds the decomposition, exactly the
// entry a full build has. Nothing stays registered.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <string>

extern "C" __attribute__((visibility("default"))) int stack_overlay_refresh_batched(
    const char* op_name) {
  std::string full(op_name);
  auto dot = full.find('.');
  std::string name = full.substr(0, dot);
  std::string overload = dot == std::string::npos ? "" : full.substr(dot + 1);
  auto op = c10::Dispatcher::singleton().findOp(c10::OperatorName("aten::" + name, overload));
  if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::FuncTorchBatchedDecomposition)) {
    return 0;
  }
  {
    torch::Library lib(
        torch::Library::IMPL, "aten", c10::DispatchKey::FuncTorchBatched, __FILE__, __LINE__);
    lib.impl(full.c_str(), torch::CppFunction::makeFallthrough());
  } // deregistered here: the FuncTorchBatched entry is recomputed
  return 1;
}
