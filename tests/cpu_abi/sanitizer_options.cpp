// Default sanitizer options for cpu_abi_test (used only by sanitizer builds,
// such as the asan preset; an ordinary build never calls it).
//
// LeakSanitizer of GCC 12's libsanitizer misreads glibc 2.36's dynamic TLS
// blocks of threads that ran code from dlopen'd libraries (here oneDNN on
// OpenMP worker threads) and crashes at exit with "Tracer caught signal 11"
// (google/sanitizers#1322). Not tracking __tls_get_addr avoids that; leak
// checking stays on.
extern "C" __attribute__((visibility("default"), used)) const char* __asan_default_options() {
  return "intercept_tls_get_addr=0";
}
