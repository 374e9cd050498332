// Corrupted and hostile sessions: loading either succeeds or throws InputError naming a file;
// it never crashes, hangs, throws anything else, or writes outside the session directory.
#include "core/errors.h"
#include "core/session_store.h"
#include "session_test_util.h"

#include <gtest/gtest.h>
#include <random>
#include <set>

namespace fs = std::filesystem;

namespace {

std::set<std::string> listing(const fs::path& root)
{
    std::set<std::string> files;
    for (const auto& f : fs::recursive_directory_iterator(root))
        files.insert(f.path().string());
    return files;
}

std::string mutate(std::string text, std::mt19937& rng)
{
    static const char* hostile[] = { "1e400", "-1", "18446744073709551616", "\"../../etc\"", "null", "[]", "{}",
        "\"\\u0000\"", "true", "\"c0001\"", "99999999999999999999999" };
    const int kind = static_cast<int>(rng() % 6);
    if (text.empty())
        return text;
    const std::size_t at = rng() % text.size();
    switch (kind) {
    case 0: // flip a byte
        text[at] = static_cast<char>(rng() % 256);
        break;
    case 1: // truncate
        text.resize(at);
        break;
    case 2: { // replace a JSON value after a colon with a hostile one
        const std::size_t colon = text.find(':', at);
        if (colon != std::string::npos) {
            std::size_t end = text.find_first_of(",}", colon);
            if (end == std::string::npos)
                end = text.size();
            text.replace(colon + 1, end - colon - 1, hostile[rng() % std::size(hostile)]);
        }
        break;
    }
    case 3: // duplicate a line
    {
        const std::size_t nl = text.find('\n', at);
        const std::size_t start = text.rfind('\n', at);
        if (nl != std::string::npos) {
            const std::size_t s = start == std::string::npos ? 0 : start + 1;
            text.insert(nl + 1, text.substr(s, nl - s + 1));
        }
        break;
    }
    case 4: // delete a span
        text.erase(at, rng() % 64);
        break;
    default: // insert garbage
        text.insert(at, std::string(rng() % 16, static_cast<char>('!' + rng() % 90)));
        break;
    }
    return text;
}

} // namespace

TEST(SessionFuzz, CorruptedSessionsFailCleanly)
{
    kl::test::TempDir tmp;
    const fs::path golden = tmp.path() / "golden";
    {
        auto store = kl::SessionStore::create(golden, kl::test::sampleHeader());
        std::string parent;
        for (int i = 0; i < 6; ++i) {
            const auto p = store->proposeCandidate(kl::test::sampleCandidate(parent, 128));
            store->recordEvaluation(kl::test::sampleEvaluation(p.candidateId, 1.1));
            parent = p.candidateId;
        }
        store->addHypothesis({ "", "pipeline", kl::Author::Human, 0 });
    }
    const std::string journal = kl::readFile(golden / "journal.jsonl");
    const std::string header = kl::readFile(golden / "session.json");
    std::mt19937 rng(std::random_device {}());
    const std::uint32_t seed = rng();
    rng.seed(seed);
    int loaded = 0, refused = 0;
    for (int it = 0; it < 400; ++it) {
        const fs::path dir = tmp.path() / ("case" + std::to_string(it));
        fs::copy(golden, dir, fs::copy_options::recursive);
        std::string j = journal, h = header;
        const int rounds = 1 + static_cast<int>(rng() % 3);
        for (int r = 0; r < rounds; ++r) {
            if (rng() % 4 == 0)
                h = mutate(h, rng);
            else
                j = mutate(j, rng);
        }
        kl::writeFileAtomic(dir / "journal.jsonl", j);
        kl::writeFileAtomic(dir / "session.json", h);
        const auto before = listing(tmp.path());
        try {
            kl::SessionStore::load(dir);
            ++loaded;
        } catch (const kl::InputError& e) {
            ++refused;
            const std::string what = e.what();
            EXPECT_TRUE(what.find("journal.jsonl") != std::string::npos
                || what.find("session.json") != std::string::npos || what.find("session") != std::string::npos)
                << "seed " << seed << " case " << it << ": error names no file: " << what;
        } catch (const std::exception& e) {
            ADD_FAILURE() << "seed " << seed << " case " << it << ": unexpected exception type: " << e.what();
        }
        EXPECT_EQ(listing(tmp.path()), before) << "load wrote files (case " << it << ")";
        fs::remove_all(dir);
    }
    EXPECT_GT(refused, 0);
    EXPECT_GT(loaded + refused, 399);
}
