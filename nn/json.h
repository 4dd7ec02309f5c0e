// A small strict JSON reader and string quoting, for the headers of safetensors files. Strict:
// RFC 8259 grammar only (no comments, trailing commas, NaN, or invalid UTF-8), duplicate object
// keys refused, nesting depth bounded, so a corrupt header fails with a position instead of
// being half-understood.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::nn::json {

struct Value {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  std::string text;  // a string's decoded value, or a number's literal text
  std::vector<Value> items;  // array elements
  std::vector<std::pair<std::string, Value>> members;  // object members, in file order

  bool is_object() const { return kind == Kind::object; }
  bool is_array() const { return kind == Kind::array; }
  bool is_string() const { return kind == Kind::string; }
  bool is_number() const { return kind == Kind::number; }
  /// The member named `key`, or null when absent (objects only).
  const Value* find(std::string_view key) const;
  /// A number that is a non-negative integer fitting in uint64 (no sign, fraction or exponent);
  /// false otherwise.
  bool as_uint64(uint64_t& out) const;
};

/// "object", "array", ... (for error messages).
const char* kind_name(Value::Kind kind);

/// Parses one JSON value; whitespace may surround it, nothing else. Throws kiln::Error
/// "<what> at byte <offset>".
Value parse(std::string_view text);

/// `s` as a JSON string literal (quotes, backslashes and control characters escaped; UTF-8
/// passes through).
std::string quote(std::string_view s);

}  // namespace kiln::nn::json
