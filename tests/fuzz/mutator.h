#pragma once
// A deterministic mutator for the ctest fuzz runs: byte edits, splices between corpus inputs, repetition (depth
// and size) and tokens that the parsers give meaning to. The same seed gives the same inputs on every machine.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace kl::fuzz {

class Mutator {
public:
    Mutator(std::uint64_t seed, std::vector<std::string> tokens)
        : m_rng(seed)
        , m_tokens(std::move(tokens))
    {
    }

    std::string mutate(const std::string& input, const std::vector<std::string>& corpus)
    {
        std::string s = input;
        const int edits = 1 + static_cast<int>(below(4));
        for (int i = 0; i < edits; ++i)
            edit(s, corpus);
        if (s.size() > kMaxSize)
            s.resize(kMaxSize);
        return s;
    }

    std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(m_rng() % n); }

private:
    static constexpr std::size_t kMaxSize = 1u << 20;

    void edit(std::string& s, const std::vector<std::string>& corpus)
    {
        const std::size_t at = below(s.size() + 1);
        switch (below(8)) {
        case 0: // flip a byte
            if (!s.empty())
                s[below(s.size())] = static_cast<char>(m_rng());
            break;
        case 1: // insert a byte
            s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), static_cast<char>(m_rng()));
            break;
        case 2: { // erase a range
            const std::size_t n = below(std::min<std::size_t>(s.size() - std::min(at, s.size()), 64) + 1);
            s.erase(at, n);
            break;
        }
        case 3: // insert a token
        case 4:
            s.insert(at, m_tokens[below(m_tokens.size())]);
            break;
        case 5: { // repeat a token many times: nesting, long chains, long names
            const std::string& t = m_tokens[below(m_tokens.size())];
            const std::size_t times = std::size_t(1) << below(15);
            std::string r;
            for (std::size_t i = 0; i < times && r.size() < kMaxSize / 2; ++i)
                r += t;
            s.insert(at, r);
            break;
        }
        case 6: { // splice in a piece of another input
            const std::string& other = corpus[below(corpus.size())];
            const std::size_t from = below(other.size() + 1);
            s.insert(at, other.substr(from, below(256)));
            break;
        }
        default: // truncate
            s.resize(at);
            break;
        }
    }

    std::mt19937_64 m_rng;
    std::vector<std::string> m_tokens;
};

} // namespace kl::fuzz
