// streamk_check: the persistent GEMM kernel's walk (kernels/problems/gemm_bf16/template_sm90.cu, struct Schedule) on
// the CPU, at the parameters it is built with, for random shapes and every cluster count a launch may have (1 to the
// k-blocks there are, past the 132 of an H200):
//   - every k-block of every tile is run exactly once, by the blocks of one cluster each taking their own row tile
//     (split-K's empty splits, past K's last block, run none);
//   - STREAMK = 1: each cluster streams the same number of k-blocks (within one) and runs as many whole tiles as the
//     others; a tile shared by several ranges has its pieces in distinct slots (two per block) and the clusters the
//     fix-up reads (owner() of the tile's first and last k-block) are exactly the ones that ran a piece of it; the
//     last arrival, in a random order of the pieces, adds up to the whole tile.
// No GPU needed (the kernels are compiled, not run). Build and run, for a parameter point:
//   nvcc -std=c++17 -O2 -DBM=128 -DBN=128 -DSTAGES=6 -DSPLITK=1 -DREDUCE=0 -DCM=1 -DGROUP=8 -DRASTER=0 -DREGSPLIT=0 \
//        -DSBN=128 -DSKMAX=8 -DSKINNY_M=32 -DSTREAMK=1 -o /tmp/streamk_check bench/hopper/streamk_check.cu
//   /tmp/streamk_check [cases]
// Exit 0 when every case holds, 1 otherwise (the first failures printed).
#include "../../kernels/problems/gemm_bf16/template_sm90.cu"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

int failures = 0;

void fail(const std::string& what)
{
    if (failures++ < 10)
        std::printf("FAIL %s\n", what.c_str());
}

// One piece of a tile: who ran it and the k-blocks it holds.
struct Piece {
    int cluster, slot;
    long long sum;
};

// The walk of every cluster at one shape and cluster count.
void checkWalk(int M, int N, int K, int clusters, std::mt19937& rng)
{
    const std::string where = "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K)
        + " clusters=" + std::to_string(clusters);
    const int mTiles = (M + BM - 1) / BM, nTiles = (N + BN - 1) / BN, kBlocks = K / BK;
    // A distinct value per k-block of each tile; a tile's pieces must add up to its whole.
    auto value = [&](int mt, int nt, int kb) { return 1 + ((long long)(mt * nTiles + nt) * 7919 + kb * 104729) % 1000003; };
    std::vector<unsigned char> seen((size_t)mTiles * nTiles * kBlocks, 0);
    std::map<int, std::vector<Piece>> shared; // block tile -> its pieces (stream-K)
    std::set<long long> slotsUsed;
    long long minStream = -1, maxStream = 0;
    int wholeTiles = -1;
    for (int cl = 0; cl < clusters; ++cl) {
        const Schedule s(M, N, K, cl, clusters);
        if (STREAMK == 1) {
            const long long streamed = s.end - s.begin;
            minStream = minStream < 0 ? streamed : std::min(minStream, streamed);
            maxStream = std::max(maxStream, streamed);
            if (s.dpTiles % clusters != 0)
                fail(where + ": whole tiles not a multiple of the clusters");
            const int whole = s.items - s.streamItems;
            if (wholeTiles >= 0 && whole != wholeTiles)
                fail(where + ": clusters run different numbers of whole tiles");
            wholeTiles = whole;
        }
        for (unsigned rank = 0; rank < CM; ++rank)
            for (int i = 0; i < s.items; ++i) {
                const Work u = s.item(i, rank);
                if (u.kBegin < 0 || u.kCount < 0 || (u.kCount > 0 && u.kBegin + u.kCount > kBlocks) || u.nt < 0 || u.nt >= nTiles
                    || u.mt < 0) {
                    fail(where + ": item out of range");
                    return;
                }
                if (u.mt >= mTiles)
                    continue; // the partner row past M: the kernel neither stores nor arrives
                long long sum = 0;
                for (int kb = u.kBegin; kb < u.kBegin + u.kCount; ++kb) {
                    unsigned char& n = seen[((size_t)u.mt * nTiles + u.nt) * kBlocks + kb];
                    if (n++ != 0)
                        fail(where + ": k-block run twice");
                    sum += value(u.mt, u.nt, kb);
                }
                if (STREAMK == 1 && u.kCount < kBlocks) {
                    if (u.streamTile < 0) {
                        fail(where + ": a partial tile outside the stream");
                        continue;
                    }
                    const int slot = s.slotOf(cl, u.streamTile);
                    if (!slotsUsed.insert((long long)(cl * CM + rank) * 2 + slot).second)
                        fail(where + ": two pieces in one slot");
                    shared[u.mt * nTiles + u.nt].push_back({ cl, slot, sum });
                }
            }
    }
    for (unsigned char n : seen)
        if (n != 1) {
            fail(where + ": a k-block not run");
            break;
        }
    if (STREAMK != 1)
        return;
    if (maxStream - minStream > 1)
        fail(where + ": stream ranges differ by more than one k-block");
    for (auto& [tile, pieces] : shared) {
        const int mt = tile / nTiles, nt = tile % nTiles;
        long long whole = 0;
        for (int kb = 0; kb < kBlocks; ++kb)
            whole += value(mt, nt, kb);
        // The fix-up as the last arrival runs it: its own sum, then every other owner's slot.
        std::shuffle(pieces.begin(), pieces.end(), rng);
        const Piece& last = pieces.back();
        const Schedule s(M, N, K, last.cluster, clusters);
        const int rank = mt % CM;
        int streamTile = -1;
        for (int i = 0; i < s.streamItems; ++i) {
            const Work u = s.item(i, rank);
            if (u.mt == mt && u.nt == nt)
                streamTile = u.streamTile;
        }
        const long long first = (long long)streamTile * kBlocks;
        std::set<int> owners, ran;
        for (const Piece& p : pieces)
            ran.insert(p.cluster);
        long long sum = last.sum;
        for (int g = s.owner(first); g <= s.owner(first + kBlocks - 1); ++g) {
            owners.insert(g);
            if (g == last.cluster)
                continue;
            bool found = false;
            for (const Piece& p : pieces)
                if (p.cluster == g && p.slot == s.slotOf(g, streamTile)) {
                    sum += p.sum;
                    found = true;
                }
            if (!found)
                fail(where + ": the fix-up reads a slot nobody wrote");
        }
        if (owners != ran)
            fail(where + ": the fix-up's owners are not the clusters that ran the tile");
        if (sum != whole)
            fail(where + ": the fix-up's sum is not the tile's");
    }
}

} // namespace

int main(int argc, char** argv)
{
    const int cases = argc > 1 ? std::atoi(argv[1]) : 400;
    std::printf("streamk_check BM=%d BN=%d CM=%d SPLITK=%d STREAMK=%d GROUP=%d RASTER=%d, %d shapes\n", BM, BN, CM, SPLITK,
        STREAMK, GROUP, RASTER, cases);
    std::mt19937 rng(15);
    std::vector<int> clusterCounts;
    for (int g = 1; g <= 300; g += g < 40 ? 1 : 7)
        clusterCounts.push_back(g);
    clusterCounts.push_back(66);
    clusterCounts.push_back(132);
    for (int k = 0; k < cases && failures == 0; ++k) {
        static const int issueSizes[3] = { 4096, 8192, 14336 };
        int M, N, K;
        const bool large = k % 25 == 0;
        if (k < 9) { // the issue's M = 128 shapes
            M = 128;
            N = issueSizes[k % 3];
            K = issueSizes[k / 3];
        } else { // the problem's range, log-uniform, kept small enough to enumerate every k-block quickly
            auto logUniform = [&](int lo, int hi, int multiple) {
                const double x = std::exp(std::uniform_real_distribution<double>(std::log(lo), std::log(hi))(rng));
                return std::max(lo, static_cast<int>(x) / multiple * multiple);
            };
            M = logUniform(1, large ? 8192 : 1024, 1);
            N = logUniform(256, large ? 16384 : 4096, 64);
            K = logUniform(256, large ? 16384 : 4096, 64);
        }
        const long long units = (long long)(((M + BM - 1) / BM + CM - 1) / CM) * ((N + BN - 1) / BN)
            * (STREAMK == 1 ? K / BK : SPLITK);
        // The launch line's grid never has more clusters than units; a large shape only at the counts around a wave.
        for (int g : large ? std::vector<int> { 1, 65, 66, 131, 132, 133 } : clusterCounts)
            if (g <= units)
                checkWalk(M, N, K, g, rng);
    }
    std::printf("%s\n", failures == 0 ? "every case holds" : "FAILED");
    return failures == 0 ? 0 : 1;
}
