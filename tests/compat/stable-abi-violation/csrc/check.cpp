// Declared by hand (the stable headers hide c10): a call into torch's C++ API.
#include <cstdint>

namespace c10::detail {
[[noreturn]] void torchCheckFail(const char* func, const char* file, uint32_t line, const char* msg);
}

void fail_loudly() { c10::detail::torchCheckFail("fail_loudly", __FILE__, __LINE__, "boom"); }
