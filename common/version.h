// The library version, printed by terse_info and exposed to the bindings.
#ifndef TERSE_COMMON_VERSION_H_
#define TERSE_COMMON_VERSION_H_

namespace terse {

inline constexpr char kVersion[] = "0.1.0";

}  // namespace terse

#endif  // TERSE_COMMON_VERSION_H_
