#pragma once
// Umbrella header for the CCurl system-library module (libcurl >= 7.85 for
// CURLOPT_PROTOCOLS_STR). `curl_easy_setopt` / `curl_easy_getinfo` are variadic,
// which Swift cannot call, so each argument type gets a typed wrapper here.
#include <curl/curl.h>

/// Signature shared by CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION.
typedef size_t (*siwa_curl_data_callback)(char *data, size_t size, size_t nmemb, void *userdata);

static inline CURLcode siwa_curl_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode siwa_curl_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode siwa_curl_setopt_str(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode siwa_curl_setopt_ptr(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode siwa_curl_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode siwa_curl_setopt_curlu(CURL *handle, CURLoption option, CURLU *value) {
    return curl_easy_setopt(handle, option, value);
}

/// For CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION.
static inline CURLcode siwa_curl_setopt_data_callback(CURL *handle, CURLoption option, siwa_curl_data_callback callback) {
    return curl_easy_setopt(handle, option, callback);
}

static inline CURLcode siwa_curl_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}

static inline CURLcode siwa_curl_getinfo_double(CURL *handle, CURLINFO info, double *value) {
    return curl_easy_getinfo(handle, info, value);
}

static inline long siwa_CURL_GLOBAL_DEFAULT(void) {
    return CURL_GLOBAL_DEFAULT;
}
