// @kl:tensormap annotations and the launch attributes (cluster, pdl, SM_COUNT): parsed and validated in core,
// so that every map the worker would refuse is an error naming the annotation and the field, without a GPU.
#include "core/errors.h"
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "core/tensor_map.h"

#include <gtest/gtest.h>

namespace {

const std::string kGemmDir = std::string(KL_SOURCE_DIR) + "/kernels/problems/gemm_bf16";

const kl::Problem& gemm()
{
    static const kl::Problem p = kl::loadProblem(kGemmDir);
    return p;
}

// A minimal TMA candidate for gemm_bf16; `mapA` and `launch` replace its A map and its launch line.
std::string candidate(const std::string& mapA = "tensor=A box=(BK, BM) swizzle=128B l2promo=256B oob=zero",
    const std::string& launch = "grid=(ceil_div(N, 128), ceil_div(M, BM)) block=(128) smem=0")
{
    return "// @kl:param BM = 64 in [64, 128, 512]\n"
           "// @kl:param BK = 64 in [8, 64, 128, 300]\n"
           "// @kl:tensormap tmA "
        + mapA
        + "\n"
          "// @kl:tensormap tmB tensor=B box=(BK, 128) swizzle=128B\n"
          "// @kl:launch k "
        + launch
        + " args=(tmA, tmB, C, M, N, K)\n"
          "#include <cuda.h>\n"
          "extern \"C\" __global__ void k(const __grid_constant__ CUtensorMap a, const __grid_constant__ CUtensorMap b,"
          " void* c, int M, int N, int K) {}\n";
}

std::string error(const std::string& source)
{
    try {
        kl::parseKernelSpec(source, gemm());
    } catch (const kl::InputError& e) {
        return e.what();
    }
    return {};
}

kl::TensorMapGeometry resolved(
    const kl::KernelSpec& spec, const std::string& map, const kl::ParamValues& params, const kl::Bindings& dims)
{
    return kl::resolveTensorMap(*spec.tensorMap(map), gemm(), kl::bindingsFor(params, dims));
}

} // namespace

TEST(TensorMap, ParsesEveryFieldAndResolvesInnermostFirst)
{
    const kl::KernelSpec spec = kl::parseKernelSpec(candidate(), gemm());
    ASSERT_EQ(spec.tensorMaps.size(), 2u);
    const kl::TensorMapSpec& a = *spec.tensorMap("tmA");
    EXPECT_EQ(a.tensor, "A");
    EXPECT_EQ(a.line, 3);
    EXPECT_EQ(a.swizzle, kl::TmaSwizzle::B128);
    EXPECT_EQ(a.l2Promotion, kl::TmaL2Promotion::B256);
    EXPECT_EQ(a.oobFill, kl::TmaOobFill::Zero);
    EXPECT_EQ(spec.tensorMap("tmB")->l2Promotion, kl::TmaL2Promotion::None);
    const auto g = resolved(spec, "tmA", spec.defaults(), { { "M", 1000 }, { "N", 4096 }, { "K", 4096 } });
    EXPECT_EQ(g.rank, 2);
    EXPECT_EQ(g.dtype, kl::DType::BF16);
    EXPECT_EQ(g.globalDim[0], 4096u); // K, the row-major tensor's last dimension
    EXPECT_EQ(g.globalDim[1], 1000u);
    EXPECT_EQ(g.globalStrideBytes[0], 4096u * 2);
    EXPECT_EQ(g.box[0], 64u);
    EXPECT_EQ(g.box[1], 64u);
    EXPECT_EQ(g.elementStrides[0], 1u);
    EXPECT_EQ(g.boxBytes(), 64u * 64 * 2);
    EXPECT_EQ(resolved(spec, "tmA", { { "BM", 128 }, { "BK", 64 } }, { { "M", 8 }, { "K", 256 } }).box[1], 128u);
}

TEST(TensorMap, MalformedAnnotationsNameTheMapAndTheField)
{
    EXPECT_NE(error(candidate("tensor=A box=(BK, BM) swizzle=256B")).find("tmA swizzle: '256B' is not one of none"),
        std::string::npos);
    EXPECT_NE(error(candidate("tensor=A box=(BK, BM) oob=nope")).find("tmA oob"), std::string::npos);
    EXPECT_NE(error(candidate("tensor=A box=(BK, BM) colour=red")).find("unknown key 'colour'"), std::string::npos);
    EXPECT_NE(error(candidate("box=(BK, BM)")).find("tmA needs tensor="), std::string::npos);
    EXPECT_NE(
        error(candidate("tensor=Q box=(BK, BM)")).find("line 3: @kl:tensormap tmA tensor: 'Q'"), std::string::npos);
    EXPECT_NE(error(candidate("tensor=A box=(BK, BQ)")).find("tmA box 'BQ' names 'BQ'"), std::string::npos);
    EXPECT_NE(
        error(candidate("tensor=A box=(BK)")).find("tmA box: has 1 extents, but A has rank 2"), std::string::npos);
    EXPECT_NE(error(candidate("tensor=A box=(BK, BM) elemstride=(1)")).find("tmA elemstride: has 1 entries"),
        std::string::npos);
    EXPECT_EQ(error(candidate("tensor=A box=(BK, BM) oob=nan")), ""); // bf16 takes nan; integers do not
}

TEST(TensorMap, EncoderRulesAreCheckedBeforeAnyDevice)
{
    const kl::KernelSpec spec = kl::parseKernelSpec(candidate(), gemm());
    const kl::Bindings dims = { { "M", 4096 }, { "N", 4096 }, { "K", 4096 } };
    auto why = [&](const std::string& map, const kl::ParamValues& p, const kl::Bindings& d) -> std::string {
        try {
            resolved(spec, map, p, d);
        } catch (const kl::InputError& e) {
            return e.what();
        }
        return {};
    };
    // The box limit of 256 per dimension.
    EXPECT_NE(
        why("tmA", { { "BM", 512 }, { "BK", 64 } }, dims).find("tmA box[1]: 'BM' is 512; a box extent is 1 to 256"),
        std::string::npos);
    // The innermost box extent in bytes: a multiple of 16, and within the swizzle span.
    EXPECT_NE(why("tmA", { { "BM", 64 }, { "BK", 300 } }, dims).find("box[0]"), std::string::npos);
    EXPECT_NE(why("tmA", { { "BM", 64 }, { "BK", 128 } }, dims)
                  .find("tmA swizzle: the innermost box extent is 256 "
                        "bytes, wider than the 128-byte swizzle span"),
        std::string::npos);
    EXPECT_EQ(why("tmA", { { "BM", 64 }, { "BK", 8 } }, dims), "");
    // Row strides: K*2 bytes must be a multiple of 16 (K = 100 is not; gemm_bf16's dims stop it elsewhere).
    EXPECT_NE(why("tmA", { { "BM", 64 }, { "BK", 64 } }, { { "M", 64 }, { "K", 100 } })
                  .find("tmA tensor: A dimension 1 has a stride of 200 bytes; a tensor map needs a multiple of 16"),
        std::string::npos);
    // Interleave needs rank 3; the address rule is the worker's, on the buffer it placed.
    EXPECT_NE(error(candidate("tensor=A box=(BK, BM) interleave=32B swizzle=32B"))
                  .find("tmA interleave: an interleaved map needs rank 3"),
        std::string::npos);
    const auto g = resolved(spec, "tmA", spec.defaults(), dims);
    EXPECT_EQ(kl::tensorMapAddressProblem(*spec.tensorMap("tmA"), g, 0x7f0000000100), "");
    EXPECT_NE(kl::tensorMapAddressProblem(*spec.tensorMap("tmA"), g, 0x7f0000000108).find("not 16-byte aligned"),
        std::string::npos);
}

TEST(TensorMap, DefaultsThatCannotBeEncodedAtAShippedShapeAreRejectedWhenParsed)
{
    // BM = 512 as the default: every tuning shape is refused, naming the shape.
    std::string src = candidate();
    src.replace(src.find("BM = 64 in"), 10, "BM = 512 in");
    const std::string e = error(src);
    EXPECT_NE(e.find("line 3: @kl:tensormap tmA box[1]: 'BM' is 512"), std::string::npos) << e;
    EXPECT_NE(e.find("with the defaults"), std::string::npos) << e;
}

TEST(TensorMap, NameMustNotShadowATensorOrParameter)
{
    std::string src = candidate();
    src.replace(src.find("tensormap tmB"), 13, "tensormap BM ");
    EXPECT_NE(error(src).find("@kl:tensormap BM: the name is taken"), std::string::npos) << error(src);
}

TEST(LaunchAttributes, ClusterAndPdlAreParsedAndValidated)
{
    const std::string two = "// @kl:param BM = 64 in [64, 128]\n"
                            "// @kl:workspace part bytes=M*N*4\n"
                            "// @kl:launch g grid=(2 * ceil_div(N, 128), ceil_div(M, BM)) block=(128) cluster=(2, 1) "
                            "smem=200000 args=(part, A, B, M, N, K)\n"
                            "// @kl:launch r grid=(ceil_div(M * N, 256)) block=(256) pdl=1 args=(C, part, M, N)\n";
    const kl::KernelSpec spec = kl::parseKernelSpec(two, gemm());
    ASSERT_EQ(spec.launches.size(), 2u);
    EXPECT_TRUE(spec.launches[0].hasCluster);
    EXPECT_EQ(spec.launches[0].cluster[0].evaluateInt({}), 2);
    EXPECT_EQ(spec.launches[0].cluster[2].evaluateInt({}), 1);
    EXPECT_FALSE(spec.launches[0].programmaticLaunch);
    EXPECT_FALSE(spec.launches[1].hasCluster);
    EXPECT_TRUE(spec.launches[1].programmaticLaunch);
    EXPECT_EQ(spec.launches[0].sharedBytes.evaluateInt({}), 200000);

    auto err = [&](const std::string& from, const std::string& to) {
        std::string s = two;
        s.replace(s.find(from), from.size(), to);
        return error(s);
    };
    // The plan's first kernel has nothing of the plan to overlap.
    EXPECT_NE(
        err("cluster=(2, 1)", "pdl=1").find("line 3: @kl:launch pdl=1 on the plan's first kernel"), std::string::npos);
    EXPECT_NE(err("pdl=1", "pdl=yes").find("pdl must be 0 or 1"), std::string::npos);
    // 2 * 4096 / 128 = 64 blocks along x is a multiple of 2; 3 is not (the tuning shape is named).
    EXPECT_NE(
        err("cluster=(2, 1)", "cluster=(3, 1)")
            .find(
                "at K=4096,M=16,N=4096 with the defaults: grid dimension 0 = 64 is not a multiple of the cluster's 3"),
        std::string::npos);
    EXPECT_NE(
        err("cluster=(2, 1)", "cluster=(16)").find("a cluster of 16 blocks exceeds the portable 8"), std::string::npos);
    EXPECT_NE(err("cluster=(2, 1)", "cluster=(0)").find("@kl:launch cluster"), std::string::npos);
    EXPECT_NE(err("cluster=(2, 1)", "cluster=(BQ)").find("@kl:launch cluster 'BQ' names 'BQ'"), std::string::npos);
    EXPECT_NE(err("cluster=(2, 1)", "colour=(2)").find("unknown launch key 'colour'"), std::string::npos);
}

TEST(LaunchAttributes, SmCountIsBuiltInForGridsClustersAndSharedMemoryOnly)
{
    const std::string persistent = "// @kl:param BM = 64 in [64, 128]\n"
                                   "// @kl:launch g grid=(min(ceil_div(M, BM) * ceil_div(N, 128), SM_COUNT)) "
                                   "block=(128) cluster=(2) args=(C, A, B, M, N, K)\n";
    const kl::KernelSpec spec = kl::parseKernelSpec(persistent, gemm());
    EXPECT_EQ(
        spec.launches[0].grid[0].evaluateInt({ { "M", 64 }, { "N", 8192 }, { "BM", 64 }, { "SM_COUNT", 132 } }), 64);
    std::string inBlock = persistent;
    inBlock.replace(inBlock.find("block=(128)"), 11, "block=(SM_COUNT)");
    EXPECT_NE(error(inBlock).find("names 'SM_COUNT'"), std::string::npos);
    // A split over a cluster sized to the machine, and a block's share of an SM: checked without a device at
    // SM_COUNT = 1 (one block per cluster here), on a device by the worker.
    const std::string split
        = "// @kl:launch g grid=(max(1, min(8, div(SM_COUNT, ceil_div(N, 128)))), ceil_div(N, 128)) "
          "block=(128) smem=(div(200000, ceil_div(ceil_div(N, 128), SM_COUNT))) "
          "cluster=(max(1, min(8, div(SM_COUNT, ceil_div(N, 128)))), 1, 1) "
          "args=(C, A, B, M, N, K)\n";
    const kl::KernelSpec clustered = kl::parseKernelSpec(split, gemm());
    EXPECT_EQ(clustered.launches[0].cluster[0].evaluateInt({ { "N", 4096 }, { "SM_COUNT", 132 } }), 4);
    EXPECT_EQ(clustered.launches[0].sharedBytes.evaluateInt({ { "N", 16384 }, { "SM_COUNT", 100 } }), 100000);
    EXPECT_NE(
        error("// @kl:param SM_COUNT = 1 in [1]\n" + persistent).find("'SM_COUNT' is built in"), std::string::npos);
}

TEST(LaunchAttributes, ClusterProblemNamesTheDimension)
{
    const std::int64_t grid[3] = { 132, 3, 1 };
    const std::int64_t fine[3] = { 2, 3, 1 }, odd[3] = { 2, 2, 1 };
    EXPECT_EQ(kl::clusterProblem(grid, fine), "");
    EXPECT_EQ(kl::clusterProblem(grid, odd), "grid dimension 1 = 3 is not a multiple of the cluster's 2");
}
