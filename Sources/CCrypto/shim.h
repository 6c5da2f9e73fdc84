#pragma once
// Umbrella header for the CCrypto system-library module (OpenSSL 3 libcrypto).
// Swift cannot call C variadic functions or function-like macros, so the few we
// need are wrapped below as typed `static inline` functions.
#include <openssl/evp.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>

/// `BIO_get_mem_data` is a macro over `BIO_ctrl`.
static inline long siwa_BIO_get_mem_data(BIO *bio, char **data) {
    return BIO_get_mem_data(bio, data);
}

/// `EVP_PKEY_PUBLIC_KEY` is a compound macro Swift does not import.
static inline int siwa_EVP_PKEY_PUBLIC_KEY(void) {
    return EVP_PKEY_PUBLIC_KEY;
}

/// Passphrase callback that always refuses. Used instead of NULL so that an
/// encrypted PEM never makes OpenSSL prompt on the controlling terminal.
static inline int siwa_pem_no_password(char *buf, int size, int rwflag, void *userdata) {
    (void)buf; (void)size; (void)rwflag; (void)userdata;
    return -1;
}

static inline pem_password_cb *siwa_pem_no_password_cb(void) {
    return siwa_pem_no_password;
}

// OpenSSL keeps some `const char *` name arguments by reference (for example
// OSSL_PARAM_BLD_push_BN stores `key` until OSSL_PARAM_BLD_to_param, and
// EVP_PKEY_CTX_new_from_name keeps `keytype`). A Swift String passed as
// `const char *` is only valid for the duration of the call, so these helpers
// pass static C string literals instead.

static inline EVP_PKEY_CTX *siwa_EVP_PKEY_CTX_new_rsa(void) {
    return EVP_PKEY_CTX_new_from_name(NULL, "RSA", NULL);
}

static inline int siwa_EVP_PKEY_is_rsa(const EVP_PKEY *pkey) {
    return EVP_PKEY_is_a(pkey, "RSA");
}

static inline int siwa_OSSL_PARAM_BLD_push_rsa_n(OSSL_PARAM_BLD *bld, const BIGNUM *n) {
    return OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, n);
}

static inline int siwa_OSSL_PARAM_BLD_push_rsa_e(OSSL_PARAM_BLD *bld, const BIGNUM *e) {
    return OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, e);
}

static inline int siwa_EVP_PKEY_get_rsa_n(const EVP_PKEY *pkey, BIGNUM **n) {
    return EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_RSA_N, n);
}

static inline int siwa_EVP_PKEY_get_rsa_e(const EVP_PKEY *pkey, BIGNUM **e) {
    return EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_RSA_E, e);
}

// --- EC P-256 (ES256 client secrets) -------------------------------------

static inline EVP_PKEY_CTX *siwa_EVP_PKEY_CTX_new_ec(void) {
    return EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
}

static inline int siwa_EVP_PKEY_is_ec(const EVP_PKEY *pkey) {
    return EVP_PKEY_is_a(pkey, "EC");
}

/// Selects the NIST P-256 curve for key generation.
static inline int siwa_EVP_PKEY_CTX_set_group_p256(EVP_PKEY_CTX *ctx) {
    return EVP_PKEY_CTX_set_group_name(ctx, "P-256");
}

/// SHA-256 fetched from the default provider (caller frees with EVP_MD_free).
static inline EVP_MD *siwa_EVP_MD_fetch_sha256(void) {
    return EVP_MD_fetch(NULL, "SHA2-256", NULL);
}

/// A verify context for RS256 on `pkey` (PKCS#1 v1.5 padding, SHA-256 digest): initialised once,
/// then EVP_PKEY_verify may be called on it repeatedly (one thread at a time).
static inline EVP_PKEY_CTX *siwa_rs256_verify_ctx(EVP_PKEY *pkey, const EVP_MD *sha256) {
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_pkey(NULL, pkey, NULL);
    if (ctx == NULL) return NULL;
    if (EVP_PKEY_verify_init(ctx) != 1 || EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PADDING) != 1
        || EVP_PKEY_CTX_set_signature_md(ctx, sha256) != 1) {
        EVP_PKEY_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/// AES-256-GCM fetched from the default provider (caller frees with EVP_CIPHER_free).
static inline EVP_CIPHER *siwa_EVP_CIPHER_fetch_aes256gcm(void) {
    return EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
}

static inline int siwa_EVP_CIPHER_CTX_get_gcm_tag(EVP_CIPHER_CTX *ctx, unsigned char *tag, int length) {
    return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, length, tag);
}

static inline int siwa_EVP_CIPHER_CTX_set_gcm_tag(EVP_CIPHER_CTX *ctx, unsigned char *tag, int length) {
    return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, length, tag);
}
