#include "profiler/json_reader.h"

#include "core/errors.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef KL_PROFILER_HAVE_ZLIB
#include <zlib.h>
#endif

namespace kl::prof {

size_t MemorySource::read(char* dst, size_t n)
{
    size_t k = std::min(n, m_bytes.size() - m_pos);
    std::memcpy(dst, m_bytes.data() + m_pos, k);
    m_pos += k;
    return k;
}

namespace {

    class FileSource : public ByteSource {
    public:
        FileSource(std::FILE* f, std::string path, uint64_t total)
            : m_f(f)
            , m_path(std::move(path))
            , m_total(total)
        {
        }
        ~FileSource() override { std::fclose(m_f); }
        size_t read(char* dst, size_t n) override
        {
            size_t k = std::fread(dst, 1, n, m_f);
            if (k == 0 && std::ferror(m_f))
                throw InputError(m_path + ": read error");
            m_done += k;
            return k;
        }
        uint64_t totalBytes() const override { return m_total; }
        uint64_t bytesConsumed() const override { return m_done; }

    private:
        std::FILE* m_f;
        std::string m_path;
        uint64_t m_total;
        uint64_t m_done = 0;
    };

    // A plain file mapped into memory: the reader parses it in place (no read() copies) and drops parsed pages.
    class MappedFileSource : public ByteSource {
    public:
        MappedFileSource(const char* data, size_t size)
            : m_data(data)
            , m_size(size)
        {
            madvise(const_cast<char*>(m_data), m_size, MADV_SEQUENTIAL);
        }
        ~MappedFileSource() override { munmap(const_cast<char*>(m_data), m_size); }
        size_t read(char* dst, size_t n) override
        {
            size_t k = std::min(n, m_size - m_pos);
            std::memcpy(dst, m_data + m_pos, k);
            m_pos += k;
            return k;
        }
        uint64_t totalBytes() const override { return m_size; }
        uint64_t bytesConsumed() const override { return std::max<uint64_t>(m_pos, m_released); }
        std::string_view wholeInput() override { return { m_data, m_size }; }
        void releaseBefore(uint64_t offset) override
        {
            constexpr uint64_t kStep = 32u << 20;
            uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
            uint64_t upTo = offset / page * page;
            if (upTo >= m_released + kStep) {
                madvise(const_cast<char*>(m_data) + m_released, upTo - m_released, MADV_DONTNEED);
                m_released = upTo;
            }
        }

    private:
        const char* m_data;
        size_t m_size;
        size_t m_pos = 0;
        uint64_t m_released = 0;
    };

#ifdef KL_PROFILER_HAVE_ZLIB
    // Inflates gzip (or zlib) input from another ByteSource; concatenated gzip members are read in sequence.
    class GzipSource : public ByteSource {
    public:
        GzipSource(std::unique_ptr<ByteSource> inner, std::string what)
            : m_inner(std::move(inner))
            , m_what(std::move(what))
        {
            m_in.resize(256 * 1024);
            std::memset(&m_z, 0, sizeof(m_z));
            if (inflateInit2(&m_z, 15 + 32) != Z_OK)
                throw InputError(m_what + ": cannot initialise zlib");
        }
        ~GzipSource() override { inflateEnd(&m_z); }
        size_t read(char* dst, size_t n) override
        {
            if (m_done)
                return 0;
            m_z.next_out = reinterpret_cast<Bytef*>(dst);
            m_z.avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
            while (m_z.avail_out > 0) {
                if (m_z.avail_in == 0) {
                    size_t k = m_inner->read(m_in.data(), m_in.size());
                    if (k == 0) {
                        if (!m_streamEnded)
                            throw InputError(m_what + ": gzip data is truncated (compressed offset "
                                + std::to_string(m_inner->bytesConsumed()) + ")");
                        m_done = true;
                        break;
                    }
                    m_z.next_in = reinterpret_cast<Bytef*>(m_in.data());
                    m_z.avail_in = static_cast<uInt>(k);
                }
                if (m_streamEnded) {
                    // Another gzip member follows (concatenated files), or trailing garbage.
                    if (inflateReset(&m_z) != Z_OK)
                        throw InputError(m_what + ": zlib reset failed");
                    m_streamEnded = false;
                }
                int rc = inflate(&m_z, Z_NO_FLUSH);
                if (rc == Z_STREAM_END) {
                    m_streamEnded = true;
                    continue;
                }
                if (rc == Z_BUF_ERROR && m_z.avail_in == 0)
                    continue;
                if (rc != Z_OK)
                    throw InputError(m_what + ": corrupt gzip data near compressed offset "
                        + std::to_string(m_inner->bytesConsumed() - m_z.avail_in) + " ("
                        + (m_z.msg ? m_z.msg : "inflate error") + ")");
            }
            return n - m_z.avail_out;
        }
        uint64_t totalBytes() const override { return m_inner->totalBytes(); }
        uint64_t bytesConsumed() const override { return m_inner->bytesConsumed() - m_z.avail_in; }

    private:
        std::unique_ptr<ByteSource> m_inner;
        std::string m_what;
        std::vector<char> m_in;
        z_stream m_z;
        bool m_streamEnded = false;
        bool m_done = false;
    };

    class OwnedMemorySource : public ByteSource {
    public:
        explicit OwnedMemorySource(std::string_view b)
            : m_mem(b)
        {
        }
        size_t read(char* dst, size_t n) override { return m_mem.read(dst, n); }
        uint64_t totalBytes() const override { return m_mem.totalBytes(); }
        uint64_t bytesConsumed() const override { return m_mem.bytesConsumed(); }

    private:
        MemorySource m_mem;
    };
#endif

    // A source that replays a few already-read bytes (the sniffed magic) before the rest.
    class PrefixedSource : public ByteSource {
    public:
        PrefixedSource(std::string prefix, std::unique_ptr<ByteSource> inner)
            : m_prefix(std::move(prefix))
            , m_inner(std::move(inner))
        {
        }
        size_t read(char* dst, size_t n) override
        {
            if (m_at < m_prefix.size()) {
                size_t k = std::min(n, m_prefix.size() - m_at);
                std::memcpy(dst, m_prefix.data() + m_at, k);
                m_at += k;
                return k;
            }
            return m_inner->read(dst, n);
        }
        uint64_t totalBytes() const override { return m_inner->totalBytes(); }
        uint64_t bytesConsumed() const override { return m_inner->bytesConsumed(); }

    private:
        std::string m_prefix;
        size_t m_at = 0;
        std::unique_ptr<ByteSource> m_inner;
    };

} // namespace

std::unique_ptr<ByteSource> openFileSource(const std::string& path)
{
    {
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            struct stat st { };
            unsigned char magic[2] = { 0, 0 };
            bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 2;
            bool gz = regular && ::pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
            if (regular && !gz) {
                void* p = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
                ::close(fd);
                if (p != MAP_FAILED)
                    return std::make_unique<MappedFileSource>(
                        static_cast<const char*>(p), static_cast<size_t>(st.st_size));
            } else {
                ::close(fd);
            }
        }
    }
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f)
        throw InputError(path + ": cannot open (" + std::strerror(errno) + ")");
    uint64_t total = 0;
    if (std::fseek(f, 0, SEEK_END) == 0) {
        long sz = std::ftell(f);
        total = sz > 0 ? static_cast<uint64_t>(sz) : 0;
        std::fseek(f, 0, SEEK_SET);
    }
    std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
    auto src = std::make_unique<FileSource>(f, path, total);
    char magic[2] = { 0, 0 };
    size_t k = src->read(magic, 2);
    bool gz = k == 2 && static_cast<unsigned char>(magic[0]) == 0x1f && static_cast<unsigned char>(magic[1]) == 0x8b;
    std::unique_ptr<ByteSource> s = std::make_unique<PrefixedSource>(std::string(magic, k), std::move(src));
    if (gz) {
#ifdef KL_PROFILER_HAVE_ZLIB
        return std::make_unique<GzipSource>(std::move(s), path);
#else
        throw InputError(path + ": gzip-compressed, but this build has no zlib; gunzip it first");
#endif
    }
    return s;
}

std::unique_ptr<ByteSource> openGzipMemorySource(std::string_view bytes)
{
#ifdef KL_PROFILER_HAVE_ZLIB
    return std::make_unique<GzipSource>(std::make_unique<OwnedMemorySource>(bytes), "<memory>");
#else
    (void)bytes;
    throw InputError("<memory>: gzip support not built");
#endif
}

// ---------------------------------------------------------------------------------------------------------

JsonReader::JsonReader(ByteSource& src, std::string what, size_t window)
    : m_src(src)
    , m_what(std::move(what))
{
    std::string_view whole = src.wholeInput();
    if (!whole.empty()) {
        m_data = whole.data();
        m_end = whole.size();
        m_eof = true;
        m_mapped = true;
        return;
    }
    m_buf.resize(std::max<size_t>(window, 4096));
    m_data = m_buf.data();
}

bool JsonReader::refill()
{
    if (m_eof)
        return false;
    // Count the newlines we are about to drop, so errors can still name a line.
    const char* b = m_buf.data();
    m_linesBefore += static_cast<uint64_t>(std::count(b, b + m_pos, '\n'));
    if (const void* nl = memrchr(b, '\n', m_pos))
        m_lastLineStart = m_consumedBefore + static_cast<uint64_t>(static_cast<const char*>(nl) - b) + 1;
    size_t keep = m_end - m_pos;
    if (keep > 0 && m_pos > 0)
        std::memmove(m_buf.data(), m_buf.data() + m_pos, keep);
    m_consumedBefore += m_pos;
    m_pos = 0;
    m_end = keep;
    if (m_end == m_buf.size()) {
        m_buf.resize(m_buf.size() * 2); // one token larger than the window (a huge string)
        m_data = m_buf.data();
    }
    size_t k = m_src.read(m_buf.data() + m_end, m_buf.size() - m_end);
    if (k == 0) {
        m_eof = true;
        return false;
    }
    m_end += k;
    return true;
}

bool JsonReader::ensure(size_t n)
{
    while (m_end - m_pos < n)
        if (!refill())
            return false;
    return true;
}

void JsonReader::fail(const std::string& what)
{
    uint64_t line = m_linesBefore + 1;
    uint64_t lineStart = m_lastLineStart;
    for (size_t i = 0; i < m_pos && i < m_end; ++i)
        if (m_data[i] == '\n') {
            ++line;
            lineStart = m_consumedBefore + i + 1;
        }
    uint64_t off = byteOffset();
    throw InputError(m_what + ":" + std::to_string(line) + ":" + std::to_string(off - lineStart + 1) + ": " + what
        + " (byte offset " + std::to_string(off) + ")");
}

static inline bool isWs(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

char JsonReader::peekSlow()
{
    for (;;) {
        while (m_pos < m_end && isWs(m_data[m_pos]))
            ++m_pos;
        if (m_pos < m_end)
            return m_data[m_pos];
        if (!refill())
            return '\0';
    }
}

void JsonReader::expectFailed(char c)
{
    char p = peek();
    if (p == '\0')
        fail(std::string("unexpected end of input, expected '") + c + "' (file truncated?)");
    fail(std::string("expected '") + c + "' but found '" + p + "'");
}

uint32_t JsonReader::readHex4()
{
    if (!ensure(4))
        fail("unterminated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
        char c = m_data[m_pos++];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= static_cast<uint32_t>(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= static_cast<uint32_t>(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= static_cast<uint32_t>(c - 'A' + 10);
        else
            fail("bad hex digit in \\u escape");
    }
    return v;
}

void JsonReader::appendUtf8(uint32_t cp, std::string& out)
{
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

std::string_view JsonReader::readString()
{
    expect('"');
    size_t start = m_pos;
    // Keys and short values: a byte loop beats two memchr calls.
    for (size_t i = m_pos, lim = std::min(m_end, m_pos + 24); i < lim; ++i) {
        char c = m_data[i];
        if (c == '"') {
            m_pos = i + 1;
            return { m_data + start, i - start };
        }
        if (c == '\\')
            break;
    }
    bool scratch = false;
    for (;;) {
        while (m_pos < m_end) {
            // Jump to the next quote, then check the skipped bytes for a backslash: two vectorised scans beat a
            // byte loop on the long kernel names that dominate traces.
            const char* base = m_data;
            const char* q = static_cast<const char*>(std::memchr(base + m_pos, '"', m_end - m_pos));
            const char* limit = q ? q : base + m_end;
            const char* bs = static_cast<const char*>(
                std::memchr(base + m_pos, '\\', static_cast<size_t>(limit - (base + m_pos))));
            m_pos = static_cast<size_t>((bs ? bs : limit) - base);
            if (m_pos >= m_end)
                break;
            char c = m_data[m_pos];
            if (c == '"') {
                if (!scratch) {
                    std::string_view v(m_data + start, m_pos - start);
                    ++m_pos;
                    return v;
                }
                m_scratch.append(m_data + start, m_pos - start);
                ++m_pos;
                return m_scratch;
            }
            if (c == '\\') {
                if (!scratch) {
                    m_scratch.clear();
                    scratch = true;
                }
                m_scratch.append(m_data + start, m_pos - start);
                ++m_pos;
                if (!ensure(1))
                    fail("unterminated string escape (file truncated?)");
                char e = m_data[m_pos++];
                switch (e) {
                case '"':
                    m_scratch.push_back('"');
                    break;
                case '\\':
                    m_scratch.push_back('\\');
                    break;
                case '/':
                    m_scratch.push_back('/');
                    break;
                case 'b':
                    m_scratch.push_back('\b');
                    break;
                case 'f':
                    m_scratch.push_back('\f');
                    break;
                case 'n':
                    m_scratch.push_back('\n');
                    break;
                case 'r':
                    m_scratch.push_back('\r');
                    break;
                case 't':
                    m_scratch.push_back('\t');
                    break;
                case 'u': {
                    uint32_t cp = readHex4();
                    if (cp >= 0xD800 && cp < 0xDC00) {
                        // A high surrogate must be followed by \uDC00..\uDFFF; otherwise emit U+FFFD.
                        if (ensure(2) && m_data[m_pos] == '\\' && m_data[m_pos + 1] == 'u') {
                            m_pos += 2;
                            uint32_t lo = readHex4();
                            if (lo >= 0xDC00 && lo < 0xE000)
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                            else {
                                appendUtf8(0xFFFD, m_scratch);
                                cp = lo >= 0xD800 && lo < 0xE000 ? 0xFFFD : lo;
                            }
                        } else {
                            cp = 0xFFFD;
                        }
                    } else if (cp >= 0xDC00 && cp < 0xE000) {
                        cp = 0xFFFD;
                    }
                    appendUtf8(cp, m_scratch);
                    break;
                }
                default:
                    fail(std::string("invalid escape '\\") + e + "' in string");
                }
                start = m_pos;
                continue;
            }
            ++m_pos;
        }
        // Window exhausted inside the string: move what we have to scratch and read on.
        if (!scratch) {
            m_scratch.clear();
            scratch = true;
        }
        m_scratch.append(m_data + start, m_pos - start);
        if (m_scratch.size() > (256u << 20))
            fail("string longer than 256 MiB");
        if (!refill())
            fail("unterminated string (file truncated?)");
        start = m_pos;
    }
}

void JsonReader::skipString()
{
    expect('"');
    for (;;) {
        while (m_pos < m_end) {
            const char* base = m_data;
            const char* q = static_cast<const char*>(std::memchr(base + m_pos, '"', m_end - m_pos));
            const char* limit = q ? q : base + m_end;
            const char* bs = static_cast<const char*>(
                std::memchr(base + m_pos, '\\', static_cast<size_t>(limit - (base + m_pos))));
            m_pos = static_cast<size_t>((bs ? bs : limit) - base);
            if (m_pos >= m_end)
                break;
            if (m_data[m_pos] == '"') {
                ++m_pos;
                return;
            }
            ++m_pos; // backslash: skip it and the escaped character
            if (!ensure(1))
                fail("unterminated string escape (file truncated?)");
            ++m_pos;
        }
        if (!refill())
            fail("unterminated string (file truncated?)");
    }
}

std::string_view JsonReader::scanNumber()
{
    peek();
    {
        // Fast path: [-]digits[.digits] that ends inside the window (almost every number in a trace).
        size_t i = m_pos;
        if (i < m_end && m_data[i] == '-')
            ++i;
        size_t intStart = i;
        while (i < m_end && m_data[i] >= '0' && m_data[i] <= '9')
            ++i;
        size_t intLen = i - intStart;
        bool ok = intLen > 0 && (intLen == 1 || m_data[intStart] != '0');
        if (ok && i < m_end && m_data[i] == '.') {
            size_t f = ++i;
            while (i < m_end && m_data[i] >= '0' && m_data[i] <= '9')
                ++i;
            ok = i > f;
        }
        if (ok && i < m_end && m_data[i] != 'e' && m_data[i] != 'E' && i - m_pos < sizeof(m_num) - 1) {
            size_t n = i - m_pos;
            std::memcpy(m_num, m_data + m_pos, n);
            m_num[n] = '\0';
            m_pos = i;
            return { m_num, n };
        }
    }
    size_t n = 0;
    auto push = [&](char c) {
        if (n >= sizeof(m_num) - 1)
            fail("number too long");
        m_num[n++] = c;
    };
    auto cur = [&]() -> int {
        if (m_pos >= m_end && !refill())
            return -1;
        return static_cast<unsigned char>(m_data[m_pos]);
    };
    int c = cur();
    if (c == '-') {
        push('-');
        ++m_pos;
        c = cur();
    }
    if (c < '0' || c > '9')
        fail(c < 0 ? "unexpected end of input in a number (file truncated?)" : "expected a value");
    if (c == '0') {
        push('0');
        ++m_pos;
        c = cur();
    } else {
        while (c >= '0' && c <= '9') {
            push(static_cast<char>(c));
            ++m_pos;
            c = cur();
        }
    }
    if (c == '.') {
        push('.');
        ++m_pos;
        c = cur();
        if (c < '0' || c > '9')
            fail("expected a digit after the decimal point");
        while (c >= '0' && c <= '9') {
            push(static_cast<char>(c));
            ++m_pos;
            c = cur();
        }
    }
    if (c == 'e' || c == 'E') {
        push('e');
        ++m_pos;
        c = cur();
        if (c == '+' || c == '-') {
            push(static_cast<char>(c));
            ++m_pos;
            c = cur();
        }
        if (c < '0' || c > '9')
            fail("expected a digit in the exponent");
        while (c >= '0' && c <= '9') {
            push(static_cast<char>(c));
            ++m_pos;
            c = cur();
        }
    }
    m_num[n] = '\0';
    return { m_num, n };
}

std::string_view JsonReader::readNumberText()
{
    return scanNumber();
}

double JsonReader::readDouble()
{
    char p = peek();
    if (p == '"') {
        std::string_view s = readString();
        double v = 0;
        auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        if (r.ec != std::errc() || r.ptr != s.data() + s.size())
            fail("expected a number, found the string \"" + std::string(s.substr(0, 40)) + "\"");
        return v;
    }
    std::string_view t = scanNumber();
    double v = 0;
    auto r = std::from_chars(t.data(), t.data() + t.size(), v);
    if (r.ec == std::errc::result_out_of_range)
        return t[0] == '-' ? -std::numeric_limits<double>::max() : std::numeric_limits<double>::max();
    if (r.ec != std::errc())
        fail("bad number '" + std::string(t) + "'");
    return v;
}

int64_t JsonReader::readInt64()
{
    char p = peek();
    std::string_view t;
    if (p == '"')
        t = readString();
    else
        t = scanNumber();
    int64_t v = 0;
    auto r = std::from_chars(t.data(), t.data() + t.size(), v);
    if (r.ec == std::errc() && r.ptr == t.data() + t.size())
        return v;
    double d = 0;
    auto rd = std::from_chars(t.data(), t.data() + t.size(), d);
    if (rd.ec != std::errc() || rd.ptr != t.data() + t.size() || !(d > -9.2e18 && d < 9.2e18))
        fail("expected an integer, found '" + std::string(t.substr(0, 40)) + "'");
    return static_cast<int64_t>(d);
}

int64_t JsonReader::readMicrosAsNanos()
{
    std::string_view t;
    if (peek() == '"')
        t = readString();
    else
        t = scanNumber();
    // Fast path: [-]digits[.digits] with at most 15 integer digits.
    const char* s = t.data();
    const char* e = s + t.size();
    bool neg = false;
    if (s < e && *s == '-') {
        neg = true;
        ++s;
    }
    int64_t ip = 0;
    int intDigits = 0;
    while (s < e && *s >= '0' && *s <= '9' && intDigits < 17) {
        ip = ip * 10 + (*s - '0');
        ++s;
        ++intDigits;
    }
    // Up to 16 integer digits (9.2e15 us fits int64 ns); Kineto's epoch-based timestamps have exactly 16.
    if (intDigits > 0 && intDigits <= 16 && ip <= 9'223'372'036'854'775ll && (s == e || *s == '.')) {
        int64_t frac = 0;
        int fd = 0;
        bool roundUp = false;
        if (s < e) {
            ++s;
            while (s < e && *s >= '0' && *s <= '9') {
                if (fd < 3) {
                    frac = frac * 10 + (*s - '0');
                    ++fd;
                } else if (fd == 3) {
                    roundUp = *s >= '5';
                    ++fd;
                }
                ++s;
            }
        }
        if (s == e) {
            while (fd < 3) {
                frac *= 10;
                ++fd;
            }
            int64_t ns = ip * 1000 + frac + (roundUp ? 1 : 0);
            return neg ? -ns : ns;
        }
    }
    double d = 0;
    auto r = std::from_chars(t.data(), t.data() + t.size(), d);
    if (r.ec != std::errc() || r.ptr != t.data() + t.size())
        fail("expected a time in microseconds, found '" + std::string(t.substr(0, 40)) + "'");
    d *= 1000.0;
    if (!(d > -9.2e18 && d < 9.2e18))
        fail("time value out of range: '" + std::string(t.substr(0, 40)) + "'");
    return static_cast<int64_t>(d);
}

bool JsonReader::readBool()
{
    char p = peek();
    const char* word = p == 't' ? "true" : p == 'f' ? "false" : nullptr;
    if (!word)
        fail("expected true or false");
    size_t len = std::strlen(word);
    if (!ensure(len) || std::memcmp(m_data + m_pos, word, len) != 0)
        fail("expected true or false");
    m_pos += len;
    return p == 't';
}

bool JsonReader::readNullIf()
{
    if (peek() != 'n')
        return false;
    if (!ensure(4) || std::memcmp(m_data + m_pos, "null", 4) != 0)
        fail("invalid literal");
    m_pos += 4;
    return true;
}

void JsonReader::skipValue()
{
    // Iterative, with an explicit depth limit, so hostile nesting cannot blow the stack.
    std::vector<char> stack; // '{' or '['
    bool expectValue = true;
    for (;;) {
        if (expectValue) {
            char c = peek();
            switch (c) {
            case '{':
            case '[':
                ++m_pos;
                if (stack.size() >= static_cast<size_t>(kMaxDepth))
                    fail("nesting deeper than " + std::to_string(kMaxDepth));
                stack.push_back(c);
                if (peek() == (c == '{' ? '}' : ']')) {
                    ++m_pos;
                    stack.pop_back();
                    break;
                }
                if (c == '{') {
                    skipString();
                    expect(':');
                }
                continue; // expect a value
            case '"':
                skipString();
                break;
            case 't':
            case 'f':
                readBool();
                break;
            case 'n':
                readNullIf();
                break;
            case '\0':
                fail("unexpected end of input (file truncated?)");
            default:
                if (c == '-' || (c >= '0' && c <= '9'))
                    scanNumber();
                else
                    fail(std::string("unexpected character '") + c + "'");
            }
            expectValue = false;
        }
        if (stack.empty())
            return;
        char c = peek();
        char open = stack.back();
        if (c == ',') {
            ++m_pos;
            if (open == '{') {
                skipString();
                expect(':');
            }
            expectValue = true;
        } else if ((open == '{' && c == '}') || (open == '[' && c == ']')) {
            ++m_pos;
            stack.pop_back();
        } else if (c == '\0') {
            fail("unexpected end of input (file truncated?)");
        } else {
            fail(std::string("expected ',' or '") + (open == '{' ? '}' : ']') + "' but found '" + c + "'");
        }
    }
}

bool JsonReader::nextMember(bool& first, std::string_view& key)
{
    if (first) {
        expect('{');
        first = false;
        if (consumeIf('}'))
            return false;
    } else {
        char c = peek();
        if (c == '}') {
            ++m_pos;
            return false;
        }
        if (c != ',') {
            if (c == '\0')
                fail("unexpected end of input inside an object (file truncated?)");
            fail(std::string("expected ',' or '}' but found '") + c + "'");
        }
        ++m_pos;
    }
    key = readString();
    // The ':' usually follows directly; if the window must refill first, the key view would dangle.
    while (m_pos < m_end && isWs(m_data[m_pos]))
        ++m_pos;
    if (m_pos >= m_end && key.data() != m_scratch.data()) {
        m_keyScratch.assign(key);
        key = m_keyScratch;
    }
    expect(':');
    return true;
}

bool JsonReader::nextElement(bool& first)
{
    if (first) {
        expect('[');
        first = false;
        return !consumeIf(']');
    }
    char c = peek();
    if (c == ']') {
        ++m_pos;
        return false;
    }
    if (c != ',') {
        if (c == '\0')
            fail("unexpected end of input inside an array (file truncated?)");
        fail(std::string("expected ',' or ']' but found '") + c + "'");
    }
    ++m_pos;
    return true;
}

} // namespace kl::prof
