#pragma once
// The field helpers beyond jsonfield's scalars, for the parsers of problem-shaped files (problem.json,
// pipeline.json): defined once in core/json_io.cpp, each throwing InputError naming the field.
#include "core/json_io.h"

#include <filesystem>
#include <vector>

namespace kl {

namespace jsonfield {
    const Json& arrayField(const Json& j, const char* key, const std::string& where);
    const Json* optionalArray(const Json& j, const char* key, const std::string& where); // nullptr when absent
    const Json* optionalObject(const Json& j, const char* key, const std::string& where); // nullptr when absent
    // An expression written as a string or an integer; fallback (when given) stands in for an absent key.
    Expr exprField(const Json& j, const char* key, const std::string& where, const char* fallback = nullptr);
    // A JSON file of at most maxBytes, parsed; InputError naming the file.
    Json readJsonFile(const std::filesystem::path& file, std::size_t maxBytes = 4u << 20);
} // namespace jsonfield

// problem.json's "dims", "constants" and "dim_constraints" into p.
void dimSpaceFromJson(const Json& j, const std::string& where, Problem& p);
// The shapes under key (absent: none), constants added, each valid in p's dims.
std::vector<Shape> shapesFromJson(const Json& j, const char* key, const Problem& p, const std::string& where);

} // namespace kl
