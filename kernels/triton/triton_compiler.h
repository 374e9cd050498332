#pragma once
// Triton candidates compiled ahead of time by Triton's own compiler: the pinned `triton` wheel in a virtual
// environment (scripts/install-deps), run as a helper process (kernels/triton/triton_aot.py) per compile, with an
// explicit target so no GPU is needed. The result is a CompiledModule like NVRTC's (CUBIN, PTX, the kernel's
// symbol) plus the launch ABI Triton adds; the worker loads and launches it like any CUDA candidate.
#include "core/problem.h"
#include "kernels/nvrtc_compiler.h"

#include <filesystem>
#include <string>
#include <vector>

namespace kl {

// The Triton release the helper must run (the GPU machine's, and what install-deps pins): major.minor.
inline constexpr const char* kTritonPinnedVersion = "3.6.0";

// The interpreter: $KL_TRITON_PYTHON, else <cache>/triton-<pin>/venv/bin/python when it exists (install-deps puts it
// there), else python3 from PATH (a machine with triton installed system-wide, as the GPU machine).
std::string tritonPython();
std::filesystem::path defaultTritonVenvDir();
// The helper script: $KL_TRITON_SCRIPT, else the one in this source tree.
std::filesystem::path tritonScript();
// "3.6.0" when the interpreter imports a triton of the pinned major.minor; otherwise empty, *why saying what is wrong.
std::string tritonVersion(std::string* why = nullptr);
// For cache keys: the version, or why there is none.
std::string tritonVersionOrWhy();

// Fills job's Triton fields from the candidate's annotations and the problem: the signature type of each launch
// argument and num_warps/num_stages at the job's parameters. Throws InputError on an argument Triton cannot type.
void prepareTritonJob(CompileJob& job, const KernelSpec& spec, const Problem& problem);
std::vector<std::string> tritonOptions(const CompileJob& job);

// Runs the helper; fills m (report.ok, log with Triton's message, cubin, ptx, lowered name, abi). Returns false when
// Triton itself could not run (not installed, the wrong version, the helper died): nothing about the candidate.
bool compileTriton(const CompileJob& job, CompiledModule& m);

} // namespace kl
