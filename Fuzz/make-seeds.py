#!/usr/bin/env python3
"""Writes the seed corpora of the parser fuzz targets into Fuzz/seeds/<target>/ (stdlib only).

One file per input, each what that parser reads: an id_token, a body Apple answers, an API request
body, an API token file, a forward secret file, a transfer list. Signatures are random bytes (the
id-token target's `.valid` mode accepts any). Deterministic (fixed random seed): re-running
reproduces the committed files exactly:

    python3 Fuzz/make-seeds.py
"""
import base64
import json
import os
import random
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "seeds")
NOW = 1752572200  # the fuzz targets' fixed "now"
SUB = "000739.90ab72d5c78444a9bdf1a3fb80ff6660.2105"
CLIENT = "com.example.app"

rng = random.Random(20261126)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def compact(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def rand(n: int) -> bytes:
    return bytes(rng.getrandbits(8) for _ in range(n))


def jwt(claims, header=None, sig_len=256) -> str:
    h = header if header is not None else {"kid": "W6WcOKB", "alg": "RS256"}
    hs = h if isinstance(h, str) else compact(h)
    cs = claims if isinstance(claims, str) else compact(claims)
    return b64(hs.encode()) + "." + b64(cs.encode()) + "." + b64(rand(sig_len))


def id_claims(**extra):
    c = {"iss": "https://appleid.apple.com", "aud": CLIENT, "exp": NOW + 600, "iat": NOW - 5, "sub": SUB,
         "at_hash": b64(rand(16)), "auth_time": NOW - 5, "nonce_supported": True}
    c.update(extra)
    return {k: v for k, v in c.items() if v is not None}


def whsec(n: int) -> str:
    return "whsec_" + base64.b64encode(rand(n)).decode("ascii")


def token(n: int = 32) -> str:
    return b64(rand(n))


SEEDS = {
    "id-token": {
        "valid": jwt(id_claims()),
        "valid-email-strings": jwt(id_claims(email="x@privaterelay.appleid.com", email_verified="true", is_private_email="true")),
        "valid-email-bools": jwt(id_claims(email="a@example.com", email_verified=True, is_private_email=False)),
        "valid-nonce": jwt(id_claims(nonce="n-0S6_WzA2Mj")),
        "valid-transfer-sub": jwt(id_claims(transfer_sub="000111.4e5f6a7b8c9d0e1f2a3b4c5d6e7f8091.0001", real_user_status=2)),
        "valid-no-auth-time": jwt(id_claims(auth_time=None)),
        "dev-key": jwt(id_claims(aud="com.example.siwa-notify.dev"), header={"kid": "dev-key", "alg": "RS256"}),
        "wrong-aud": jwt(id_claims(aud="de.lunaone.sign-in-with-apple-example")),
        "expired": jwt(id_claims(exp=NOW - 61)),
        "old-iat": jwt(id_claims(iat=NOW - 3601)),
        "no-exp": jwt(id_claims(exp=None)),
        "alg-none": jwt(id_claims(), header={"alg": "none"}, sig_len=0),
        "crit": jwt(id_claims(), header={"kid": "W6WcOKB", "alg": "RS256", "crit": ["exp"]}),
        "email-number": jwt(id_claims(email=1)),
        "two-segments": b64(b'{"alg":"RS256","kid":"k"}') + "." + b64(compact(id_claims()).encode()),
    },
    "apple-answers": {
        "token": compact({"access_token": token(), "token_type": "Bearer", "expires_in": 3600,
                          "refresh_token": "r" + rand(16).hex() + ".0.sr." + token(16), "id_token": jwt(id_claims())}),
        "refresh": compact({"access_token": token(), "token_type": "Bearer", "expires_in": 3600, "id_token": jwt(id_claims())}),
        "refresh-no-id-token": compact({"access_token": token(), "token_type": "Bearer", "expires_in": 3600}),
        "invalid-grant": '{"error":"invalid_grant"}',
        "invalid-client": '{"error":"invalid_client","error_description":"client authentication failed"}',
        "other-error": '{"error":"' + "x" * 80 + '"}',
        "client-credentials": compact({"access_token": token(), "token_type": "Bearer", "expires_in": 3600}),
        "transfer-sub": compact({"transfer_sub": "000111.4e5f6a7b8c9d0e1f2a3b4c5d6e7f8091.0001"}),
        "migrated-user": compact({"sub": SUB, "email": "x@privaterelay.appleid.com", "is_private_email": "true"}),
        "migrated-user-bool": compact({"sub": SUB, "email": "", "is_private_email": False}),
        "expires-in-float": compact({"access_token": token(), "expires_in": 3600.5}),
        "not-object": '["access_token"]',
        "empty": "",
    },
    "api-bodies": {
        "exchange": compact({"code": "c" + rand(8).hex(), "client_id": CLIENT}),
        "exchange-full": compact({"code": "c" + rand(8).hex(), "client_id": CLIENT, "redirect_uri": "https://example.com/cb",
                                  "nonce": "n-0S6_WzA2Mj"}),
        "exchange-nonce-number": compact({"code": "c", "client_id": CLIENT, "nonce": 1}),
        "exchange-unknown-client": compact({"code": "c", "client_id": "com.example.other"}),
        "exchange-nfc-client": compact({"code": "c", "client_id": "\u00e9"}),
        "hand-over": compact({"client_id": CLIENT, "refresh_token": "r" + rand(16).hex() + ".0.sr." + token(16),
                              "id_token": jwt(id_claims())}),
        "hand-over-no-id-token": compact({"client_id": CLIENT, "refresh_token": "r.0.sr.x"}),
        "duplicate-members": '{"code":"a","code":"b","client_id":"com.example.app"}',
        "not-json": "code=abc&client_id=com.example.app",
    },
    "api-tokens": {
        "one": token() + "\n",
        "rotation": "# rotated 2026-11-01\n" + token() + "\n" + token(24) + "\n",
        "crlf-and-blanks": "\r\n  " + token() + "  \r\n\r\n",
        "too-short": "0123456789abcde\n",
        "space-inside": "0123456789 abcdef0123\n",
        "non-ascii": "0123456789abcdef\u00e9\n",
        "only-comments": "# none\n#\n",
        "empty": "",
    },
    "forward-secrets": {
        "one": whsec(32) + "\n",
        "rotation": "# new first\n" + whsec(32) + "\n" + whsec(24) + "\n",
        "max-size": whsec(64),
        "too-small": whsec(23) + "\n",
        "too-large": whsec(65) + "\n",
        "unpadded": whsec(32).rstrip("=") + "\n",
        "url-alphabet": "whsec_" + b64(rand(32)) + "\n",
        "no-prefix": base64.b64encode(rand(32)).decode("ascii") + "\n",
        "crlf": whsec(32) + "\r\n",
        "empty": "",
    },
    "transfer-list": {
        "export": "\n".join(compact({"transfer_sub": "000111.%s.%04d" % (rand(16).hex(), i)}) for i in range(3)) + "\n",
        "bare": "# from the sending team\n000111.abc.0001\n000111.abc.0002\n\n",
        "duplicates": "000111.abc.0001\n" + compact({"transfer_sub": "000111.abc.0001"}) + "\n",
        "with-sub": compact({"transfer_sub": "000111.abc.0001", "sub": SUB}) + "\n",
        "space-in-id": "000111 abc\n",
        "long-id": "t" * 257 + "\n",
        "crlf": "000111.abc.0001\r\n000111.abc.0002\r\n",
        "bad-json": '{"transfer_sub":\n',
        "empty": "",
    },
}


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    for target, seeds in SEEDS.items():
        os.makedirs(os.path.join(OUT, target))
        for name, text in seeds.items():
            with open(os.path.join(OUT, target, name), "wb") as f:
                f.write(text.encode("utf-8"))
    print("wrote", sum(len(s) for s in SEEDS.values()), "seeds for", len(SEEDS), "targets into", OUT)


if __name__ == "__main__":
    main()
