#!/usr/bin/env python3
"""Writes the seed corpus for Fuzz/FuzzVerifier.swift into Fuzz/corpus/ (Python 3 stdlib only).

Every file is one HTTP request body, shaped like Apple's server-to-server notifications
(`{"payload":"<compact JWS>"}`), or a JWK set document. Signatures are random bytes: the fuzz
entry's `.valid` mode accepts any signature. Deterministic (fixed random seed), so re-running
reproduces the committed files exactly:

    python3 Fuzz/make-corpus.py
"""
import base64
import json
import os
import random
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")

AUD = "de.lunaone.sign-in-with-apple-example"
ISS = "https://appleid.apple.com"
SUB = "000739.90ab72d5c78444a9bdf1a3fb80ff6660.2105"
NOW = 1752572200  # the fuzz entry's fixed "now"
IAT = 1752572197
EXP = 1752658597
EVENT_TIME = 1752572190719

rng = random.Random(20250715)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def compact(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def sig(n: int = 256) -> str:
    return b64(bytes(rng.getrandbits(8) for _ in range(n)))


def token(header, claims, signature=None) -> str:
    h = header if isinstance(header, str) else compact(header)
    c = claims if isinstance(claims, str) else compact(claims)
    s = sig() if signature is None else signature
    return b64(h.encode()) + "." + b64(c.encode()) + "." + s


def body(tok) -> bytes:
    return compact({"payload": tok}).encode()


HEADER = {"kid": "E6q83RB15n", "alg": "RS256"}


def event(type_, **extra):
    e = {"type": type_, "sub": SUB, "event_time": EVENT_TIME}
    e.update(extra)
    return e


def claims(ev, as_string=True, **overrides):
    c = {"iss": ISS, "aud": AUD, "exp": EXP, "iat": IAT, "jti": "8sIboCeUBQuZ0M7x91YKZQ",
         "events": compact(ev) if as_string else ev}
    c.update(overrides)
    return {k: v for k, v in c.items() if v is not None}


def nested(depth: int):
    v = "x"
    for _ in range(depth):
        v = [v]
    return v


EMAIL = "hkqr9xg7vk@privaterelay.appleid.com"
seeds = {}

# Valid, Apple-shaped: all four types, events as a JSON string (Apple) and as an object.
for t in ["consent-revoked", "account-delete", "email-disabled", "email-enabled"]:
    extra = {"email": EMAIL, "is_private_email": "true"} if t.startswith("email") else {}
    seeds[f"valid-{t}-string"] = body(token(HEADER, claims(event(t, **extra))))
    seeds[f"valid-{t}-object"] = body(token(HEADER, claims(event(t, **extra), as_string=False)))
seeds["valid-account-deleted-alias"] = body(token(HEADER, claims(event("account-deleted"))))
seeds["valid-unknown-type"] = body(token(HEADER, claims(event("email-changed", email=EMAIL))))
seeds["valid-private-email-bool"] = body(token(HEADER, claims(event("email-enabled", email=EMAIL, is_private_email=False))))
seeds["valid-private-email-string-false"] = body(token(HEADER, claims(event("email-disabled", email="a@example.com",
                                                                               is_private_email="false"))))
seeds["valid-no-exp"] = body(token(HEADER, claims(event("consent-revoked"), exp=None)))
seeds["valid-second-audience-extra-members"] = body(token(
    {"alg": "RS256", "kid": "W6WcOKB", "typ": "JWT"},
    claims(event("email-enabled", email=EMAIL, is_private_email=True, extra={"a": [1, 2.5, None]}),
           aud="com.example.app", nbf=IAT)))
seeds["valid-unicode"] = body(token(HEADER, claims(event("email-enabled", email="\u00e9\u00e8@example.com",
                                                         sub="sub-\U0001F600-e\u0301"), jti="j\u00e9ti")))

# Rejected early: algorithm, key id, structure.
seeds["alg-none"] = body(token({"alg": "none"}, claims(event("account-delete")), signature=""))
seeds["alg-hs256"] = body(token({"alg": "HS256", "kid": "E6q83RB15n"}, claims(event("consent-revoked")), signature=sig(32)))
seeds["missing-kid"] = body(token({"alg": "RS256"}, claims(event("consent-revoked"))))
full = token(HEADER, claims(event("consent-revoked")))
seeds["truncated-token"] = body(full[: len(full) // 2])
seeds["extra-segment"] = body(full + "." + sig(8))
seeds["two-segments"] = body(full.rsplit(".", 1)[0])
seeds["padded-base64"] = body(full + "==")
seeds["header-not-object"] = body(token("[\"RS256\"]", claims(event("consent-revoked"))))

# Rejected on claims / events.
seeds["expired"] = body(token(HEADER, claims(event("consent-revoked"), exp=NOW - 3600)))
seeds["iat-future"] = body(token(HEADER, claims(event("consent-revoked"), iat=NOW + 3600)))
seeds["exp-float-string"] = body(token(HEADER, claims(event("consent-revoked"), exp="1752658597", iat=1752572197.5)))
seeds["wrong-iss-aud"] = body(token(HEADER, claims(event("consent-revoked"), iss=ISS + "/", aud=[AUD])))
seeds["events-not-json"] = body(token(HEADER, claims(event("consent-revoked"), events="{\"type\":")))
seeds["event-missing-sub-type"] = body(token(HEADER, claims({"event_time": EVENT_TIME})))
seeds["deep-nesting"] = body(token(HEADER, claims(event("consent-revoked", extra=nested(30)), as_string=False)))
seeds["too-deep-nesting"] = body(token(HEADER, claims(event("consent-revoked"), deep=nested(40))))

# Body-level oddities.
seeds["body-no-payload"] = b'{"token":"a.b.c"}'
seeds["body-payload-number"] = b'{"payload":12}'
seeds["body-duplicate-payload"] = b'{"payload":"a.b.c","payload":"d.e.f"}'

# JWK sets (also fed to JWKSet.parseRSAKeys).
n = b"\x00" + bytes(rng.getrandbits(8) for _ in range(256))
seeds["jwks-apple"] = compact({"keys": [
    {"kty": "RSA", "kid": "E6q83RB15n", "use": "sig", "alg": "RS256", "n": b64(n), "e": "AQAB"},
    {"kty": "RSA", "kid": "W6WcOKB", "use": "sig", "alg": "RS256", "n": b64(n[1:]), "e": "AQAB"},
]}).encode()
seeds["jwks-mixed"] = compact({"keys": [
    {"kty": "EC", "kid": "ec", "crv": "P-256", "x": "AA", "y": "AA"},
    {"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
    {"kty": "RSA", "kid": "", "n": "AQAB", "e": "AQAB"},
    {"kty": "RSA", "kid": "zero", "n": "AAAA", "e": "AQAB"},
    {"kty": "RSA", "kid": "pad", "n": "AQAB=", "e": "AQAB"},
    "not-an-object",
    {"kty": "RSA", "kid": "ok", "alg": "RS256", "n": "AQAB", "e": "AAEAAQ"},
]}).encode()
seeds["jwks-empty"] = b'{"keys":[]}'

# Bounds on what a signed token may say: iat required; event_time (ms) in [2019-01-01, iat + 1 h].
# (Last, so the random signatures of the seeds above stay as committed.)
seeds["missing-iat"] = body(token(HEADER, claims(event("consent-revoked"), iat=None)))
seeds["event-time-seconds"] = body(token(HEADER, claims(event("consent-revoked", event_time=EVENT_TIME // 1000))))
seeds["event-time-after-iat"] = body(token(HEADER, claims(event("consent-revoked", event_time=IAT * 1000 + 3_600_001))))
seeds["valid-event-time-2019"] = body(token(HEADER, claims(event("consent-revoked", event_time=1_546_300_800_000))))


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} files to {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
