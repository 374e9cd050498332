#pragma once
// A streaming JSON pull reader for multi-gigabyte traces: reads through a fixed-size window that refills
// from a ByteSource, never builds a DOM, and reports errors with line, column and byte offset.
// nlohmann's DOM needs ~10x the file size in memory and its SAX interface still allocates a std::string per
// key and value, which caps ingest well below the 1M events/s target; this reader hands out string_views.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kl::prof {

class ByteSource {
public:
    virtual ~ByteSource() = default;
    // Reads up to n bytes; returns 0 at end of input. Throws kl::InputError on read errors.
    virtual size_t read(char* dst, size_t n) = 0;
    virtual uint64_t totalBytes() const { return 0; } // 0 = unknown
    virtual uint64_t bytesConsumed() const = 0; // of the underlying (possibly compressed) input
    // The whole input, when it is already in memory (an mmapped file): the reader then parses in place.
    virtual std::string_view wholeInput() { return {}; }
    // The reader has finished with bytes before `offset` of wholeInput() (lets a mapping drop its pages).
    virtual void releaseBefore(uint64_t) { }
};

// Memory input (tests, fuzzing); the bytes must outlive the source.
class MemorySource : public ByteSource {
public:
    explicit MemorySource(std::string_view bytes)
        : m_bytes(bytes)
    {
    }
    size_t read(char* dst, size_t n) override;
    uint64_t totalBytes() const override { return m_bytes.size(); }
    uint64_t bytesConsumed() const override { return m_pos; }

private:
    std::string_view m_bytes;
    size_t m_pos = 0;
};

// A file, plain or gzip-compressed (detected by its magic bytes; gzip needs zlib at build time).
std::unique_ptr<ByteSource> openFileSource(const std::string& path);

// Gzip-compressed memory (for fuzzing the decompression path).
std::unique_ptr<ByteSource> openGzipMemorySource(std::string_view bytes);

class JsonReader {
public:
    JsonReader(ByteSource& src, std::string what, size_t window = 1 << 20);

    // Next non-whitespace character without consuming it; '\0' at end of input.
    char peek()
    {
        if (m_pos < m_end) {
            char c = m_data[m_pos];
            if (c != ' ' && c != '\n' && c != '\r' && c != '\t')
                return c;
        }
        return peekSlow();
    }
    bool atEnd() { return peek() == '\0'; }
    bool consumeIf(char c)
    {
        if (peek() == c) {
            ++m_pos;
            return true;
        }
        return false;
    }
    void expect(char c)
    {
        if (peek() == c)
            ++m_pos;
        else
            expectFailed(c);
    }
    // The view stays valid until the next call on the reader.
    std::string_view readString();
    // Number token text (validated JSON number syntax); view valid until the next call.
    std::string_view readNumberText();
    int64_t readInt64(); // accepts integral JSON numbers; also "123" strings; fractions are truncated
    double readDouble();
    // A decimal number of microseconds (as in Chrome traces) converted to integer nanoseconds without the
    // precision loss of a double (1.7e15 us needs 61 bits of ns).
    int64_t readMicrosAsNanos();
    bool readBool();
    bool readNullIf(); // consumes null if next
    void skipValue();
    // Iterates an object's members: while (r.nextMember(first, key)) { ... read the value ... }
    bool nextMember(bool& first, std::string_view& key);
    bool nextElement(bool& first); // arrays: true while another element follows

    [[noreturn]] void fail(const std::string& what);
    uint64_t byteOffset() const { return m_consumedBefore + m_pos; }
    uint64_t inputBytesConsumed() const { return m_mapped ? m_pos : m_src.bytesConsumed(); }
    uint64_t inputBytesTotal() const { return m_src.totalBytes(); }
    const std::string& what() const { return m_what; }
    // Lets a mapped source drop pages already parsed (keeps resident memory flat on multi-GB files).
    void releaseConsumed()
    {
        if (m_mapped)
            m_src.releaseBefore(m_pos);
    }

    static constexpr int kMaxDepth = 512;

private:
    char peekSlow();
    [[noreturn]] void expectFailed(char c);
    bool refill(); // keeps the bytes from m_pos; false at end of input
    bool ensure(size_t n); // at least n bytes available from m_pos
    void skipString();
    std::string_view scanNumber();
    void appendUtf8(uint32_t cp, std::string& out);
    uint32_t readHex4();

    ByteSource& m_src;
    std::string m_what;
    std::vector<char> m_buf; // the window (streaming mode)
    const char* m_data = nullptr; // m_buf.data(), or the whole mapped input
    bool m_mapped = false;
    size_t m_pos = 0;
    size_t m_end = 0;
    bool m_eof = false;
    uint64_t m_consumedBefore = 0;
    uint64_t m_linesBefore = 0;
    uint64_t m_lastLineStart = 0; // byte offset just after the last newline before the window
    std::string m_scratch;
    std::string m_keyScratch;
    char m_num[80];
};

} // namespace kl::prof
