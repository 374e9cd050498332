#include "core/errors.h"
#include "core/profile_summary.h"

#include <gtest/gtest.h>

using namespace kl;

namespace {

CandidateProfile twoKernels()
{
    CandidateProfile p;
    p.candidateId = "c0007";
    p.shape = "T=4096,H=8192";
    p.candidateUs = 30.0;
    p.baselineUs = 90.0;
    p.kernels.push_back({ "rmsnorm_reduce", 8.0, 20.0, 15.0, 50.0 });
    p.kernels.push_back({ "rmsnorm_scale", 22.0, 72.0, 25.0, 80.0 });
    return p;
}

} // namespace

TEST(ProfileSummary, SaysTheFiguresTheBoundAndWhatLimitsIt)
{
    const std::string s = bottleneckSummary(twoKernels());
    EXPECT_NE(s.find("Profile of c0007 on T=4096,H=8192"), std::string::npos) << s;
    EXPECT_NE(s.find("30.00 us of GPU time per run vs 90.00 us for the baseline (3.00x)"), std::string::npos) << s;
    EXPECT_NE(s.find("- rmsnorm_scale: 22.00 us, DRAM 72.0% of peak, SM 25.0%, achieved occupancy 80.0%: memory-bound"),
        std::string::npos)
        << s;
    EXPECT_NE(
        s.find("- rmsnorm_reduce: 8.00 us, DRAM 20.0% of peak, SM 15.0%, achieved occupancy 50.0%: latency-bound"),
        std::string::npos)
        << s;
    // The longest kernel decides.
    EXPECT_NE(s.find("Bound: memory-bound (its longest kernel, rmsnorm_scale)"), std::string::npos) << s;
    EXPECT_NE(
        s.find("What limits it: memory-bound below the ceiling (DRAM 72%, achieved occupancy 80%)"), std::string::npos)
        << s;
}

TEST(ProfileSummary, WithoutCountersSaysWhy)
{
    CandidateProfile p;
    p.candidateId = "c0002";
    p.kernels.push_back({ "k", 5.0, -1, -1, -1 });
    p.note = "no speed-of-light counters: ERR_NVGPUCTRPERM";
    const std::string s = bottleneckSummary(p);
    EXPECT_NE(s.find("DRAM n/a"), std::string::npos) << s;
    EXPECT_NE(s.find("Bound: unknown"), std::string::npos) << s;
    EXPECT_EQ(s.find("What limits it"), std::string::npos) << s;
    EXPECT_NE(s.find("ERR_NVGPUCTRPERM"), std::string::npos) << s;
}

TEST(ProfileSummary, JsonRoundTripAndErrorsNameTheField)
{
    const CandidateProfile p = twoKernels();
    const CandidateProfile back = candidateProfileFromJson(toJson(p), "event 7.data");
    EXPECT_EQ(bottleneckSummary(back), bottleneckSummary(p));
    nlohmann::json bad = toJson(p);
    bad["kernels"][1]["dram_pct"] = "fast";
    try {
        candidateProfileFromJson(bad, "event 7.data");
        FAIL() << "accepted a string as a number";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("event 7.data.kernels[1]"), std::string::npos) << e.what();
    }
}
