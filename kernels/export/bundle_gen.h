#pragma once
// Internal: the generators of the bundle's source files. One BundleModel is built from the session and the
// problem, then each generator renders one file from it.
#include "core/kernel_spec.h"
#include "core/problem.h"
#include "core/session.h"
#include "kernels/export/exporter.h"

#include <map>
#include <string>
#include <vector>

namespace kl::exporter::detail {

// Triton's compile of a Triton candidate for one architecture: what the bundle's driver-API launcher loads.
struct TritonCubin {
    std::string arch; // "sm_90a"
    std::string cubin; // raw ELF bytes
    std::string symbol; // the kernel's name in the CUBIN
    KernelAbi abi; // dynamic shared memory and the scratch pointers Triton appends
};

// One implementation the dispatcher can call: the exported candidate, or the fallback kernel.
struct KernelImpl {
    std::string role; // "candidate" or "fallback"
    std::string source; // baked, ready for nvcc (Triton: the @triton.jit source, parameters named in a comment)
    KernelSpec spec;
    ParamValues params;
    int devicePatched = 0; // helper functions that needed __device__ for nvcc
    // Triton candidates (spec.language == Triton): no device code for nvcc, a CUBIN per architecture instead.
    std::vector<TritonCubin> cubins;
    std::string tritonVersion;
    int numWarps = 0;
    int numStages = 0;
    bool triton() const { return spec.language == KernelLanguage::Triton; }
};

struct BundleModel {
    std::string prefix; // "kl_rmsnorm"
    std::string upper; // "KL_RMSNORM"
    std::string cudaArch; // "90a"
    const Session* session = nullptr;
    const Problem* problem = nullptr;
    const Candidate* candidate = nullptr;
    const Evaluation* evaluation = nullptr;
    const ExportPlan* plan = nullptr;
    bool forced = false;
    KernelImpl cand;
    bool libraryFallback = false; // cuBLAS
    KernelImpl fallback; // when !libraryFallback
    std::string banner; // the provenance comment shared by headers (already comment-safe)
};

// Adds __device__ to namespace-scope functions that have no execution-space annotation: NVRTC compiles
// candidates with -default-device, nvcc has no such switch. Returns how many it changed.
int addDeviceQualifiers(std::string& source);

// Text made safe inside a /* */ comment, on one line.
std::string commentSafe(const std::string& s);

std::string genDispatchHeader(const BundleModel& m);
std::string genApiHeader(const BundleModel& m);
std::string genDispatchC(const BundleModel& m);
std::string genKernelHeader(const BundleModel& m, const KernelImpl& k, const std::string& title);
std::string genKernelLauncher(const BundleModel& m, const KernelImpl& k);
std::string genCublasLauncher(const BundleModel& m);
std::string genRunCu(const BundleModel& m);
// Triton candidates: the CUBINs as C arrays (src/P_candidate_cubin.h), the raw file name of one, and the Triton
// source as a Python module for PyTorch users (torch/P_triton.py).
std::string genCubinTable(const BundleModel& m, const KernelImpl& k);
std::string cubinFileName(const BundleModel& m, const TritonCubin& c);
std::string genTritonModule(const BundleModel& m, const KernelImpl& k);
std::string genSelfTest(const BundleModel& m);
// What every generated self-test shares (C++ for nvcc): KL_CHECK, the element kinds and their host/device copies,
// TensorInfo, the harness's error measure (compare), median, klIntValues (problem.json "values" of integer inputs).
std::string selfTestSupportC();
const char* selfTestKind(DType t); // the self-test's element kind: "KL_BF16"
std::string torchScalarType(DType t); // "at::kBFloat16"
std::string cDouble(double v); // a C double literal that reads back as v: "0.0156", "1.0"
std::string genDispatchTest(const BundleModel& m);
std::string genTorchOp(const BundleModel& m);
std::string genTorchLoader(const BundleModel& m);
std::string genCMake(const BundleModel& m);
// The CMake block that sets CMAKE_CUDA_ARCHITECTURES to arch ("90a") unless given; it goes before project().
std::string cudaArchCMake(const std::string& arch);
// The CMake block that builds lib<P>_torch.so from torch/<P>_op.cpp when KL_BUILD_TORCH is on.
std::string torchCMake(const std::string& prefix);
std::string genReadme(const BundleModel& m);

// What the generated dispatcher must answer for a shape, computed independently with core's expression
// evaluator: 1 candidate, 0 fallback, -1 neither supports it.
int expectedSelection(const BundleModel& m, const Shape& s);

// The C API's parameter list after the dims: tensors in problem order, then scalars.
struct ApiParam {
    std::string cType; // "const void*", "void*", "float", "int"
    std::string name;
    bool tensor = false;
    bool output = false; // the torch op allocates and returns it
    bool inPlace = false; // read and updated in place (TensorRole::InOut): the torch op mutates the argument
    const TensorSpec* spec = nullptr;
    const ScalarSpec* scalar = nullptr;
};
std::vector<ApiParam> apiParams(const Problem& p);
std::string cIdent(const std::string& s); // safe C identifier
std::string upperOf(std::string s); // ASCII case, for prefixes and macro names
std::string lowerOf(std::string s);
// The problem's value of s as a C expression, its formula reading dims from `dimsPtr->NAME`.
std::string scalarValueC(const ScalarSpec& s, const std::string& dimsPtr);

} // namespace kl::exporter::detail
