#!/usr/bin/env python3
"""Makes the benchmark's signing key and pre-signs Apple-shaped notifications.

    presign.py key CACHE_DIR                  -> CACHE_DIR/key.pem, CACHE_DIR/jwks.json (kept if present)
    presign.py sign CACHE_DIR KIND COUNT      -> prints the path of a bodies file, one HTTP body a line:
                                                 {"payload":"<compact RS256 JWS>"}
    presign.py sign-once CACHE_DIR KIND COUNT -> the same, never re-signed for its age: the caller runs
                                                 the server at the bodies' own time (the burst mode)

Bodies are cached per key (CACHE_DIR/<key fingerprint>/<kind>-<count>.bodies, with a .json of when
they were signed) and re-signed when older than MAX_AGE (the tokens carry exp = iat + 86400),
except with sign-once. Every token has a unique `jti` (22 base64url
characters) and a unique (sub, type, event_time) triple; KIND prefixes the sub, so bodies of
different kinds never collide in one database. KIND `burst<N>`: every type, most for the N users
that the burst mode (siwabench/burst.py) preloads (see burst_event). Signing runs on a
multiprocessing pool (2 processes by default, BENCH_SIGN_PROCS).
"""
import base64
import hashlib
import json
import multiprocessing
import os
import sys
import time

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

KID = "bench-1"
AUDIENCE = "com.example.bench"
MAX_AGE = 12 * 3600  # seconds: re-sign well before exp (iat + 86400) is reached


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def ensure_key(cache: str):
    os.makedirs(cache, exist_ok=True)
    pem_path = os.path.join(cache, "key.pem")
    if not os.path.exists(pem_path):
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        tmp = pem_path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(pem)
        os.replace(tmp, pem_path)
    with open(pem_path, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    numbers = key.public_key().public_numbers()
    n = numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")
    e = numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")
    jwks = {"keys": [{"kty": "RSA", "kid": KID, "use": "sig", "alg": "RS256", "n": b64url(n), "e": b64url(e)}]}
    jwks_path = os.path.join(cache, "jwks.json")
    with open(jwks_path + ".tmp", "w") as f:
        json.dump(jwks, f)
    os.replace(jwks_path + ".tmp", jwks_path)
    fingerprint = hashlib.sha256(n).hexdigest()[:16]
    return key, pem_path, jwks_path, fingerprint


_key = None
_job = None


def _init(pem_path, job):
    global _key, _job
    with open(pem_path, "rb") as f:
        _key = serialization.load_pem_private_key(f.read(), password=None)
    _job = job


def _sign_range(bounds):
    start, end = bounds
    kind, fingerprint, now, base_ms, event_type = _job
    header = b64url(json.dumps({"kid": KID, "alg": "RS256"}, separators=(",", ":")).encode())
    out = []
    for i in range(start, end):
        jti = b64url(hashlib.sha256(f"{fingerprint}/{kind}/{now}/{i}".encode()).digest()[:16])
        sub = f"000{i % 1000:03d}.bench{kind}.{i:08d}"
        event = {"type": event_type, "sub": sub, "event_time": base_ms + i}
        if kind.startswith("burst"):
            event = burst_event(int(kind[len("burst"):]), i, sub, base_ms)
        events = json.dumps(event, separators=(",", ":"))
        claims = {"iss": "https://appleid.apple.com", "aud": AUDIENCE, "exp": now + 86400, "iat": now,
                  "jti": jti, "events": events}
        payload = b64url(json.dumps(claims, separators=(",", ":")).encode())
        signing_input = f"{header}.{payload}".encode()
        signature = _key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        token = f"{header}.{payload}.{b64url(signature)}"
        out.append(json.dumps({"payload": token}, separators=(",", ":")))
    return out


BURST_TYPES = ["consent-revoked", "email-disabled", "email-enabled", "account-delete", "some-new-type"]


def bench_sub(a: int) -> str:
    """The sub of bench account `a` (siwabench/dataset.py SCALE_FUNCTIONS' public.bench_sub(a, ''))."""
    head = f"{a:06d}" if a < 1000000 else str(a)
    return f"{head}.{hashlib.md5(str(a).encode()).hexdigest()}.{a % 10000:04d}"


def burst_event(accounts: int, i: int, new_sub: str, base_ms: int) -> dict:
    """Kind `burst<accounts>`: every type in turn (one in five unknown); nine in ten for one of the
    `accounts` preloaded users (spread over all of them), the others for users never seen."""
    event_type = BURST_TYPES[i % len(BURST_TYPES)]
    sub = new_sub if i % 10 == 9 or accounts == 0 else bench_sub((i * 7919) % accounts)
    event = {"type": event_type, "sub": sub, "event_time": base_ms + i}
    if event_type.startswith("email-"):
        event.update({"email": f"b{i}@privaterelay.appleid.com", "is_private_email": "true"})
    return event


def sign(cache: str, kind: str, count: int, any_age: bool = False) -> str:
    _, pem_path, _, fingerprint = ensure_key(cache)
    directory = os.path.join(cache, fingerprint)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{kind}-{count}.bodies")
    meta_path = path + ".json"
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        if (any_age or time.time() - meta["iat"] < MAX_AGE) and os.path.getsize(path) == meta["bytes"]:
            return path
    except (OSError, ValueError, KeyError):
        pass
    now = int(time.time())
    # event_time: one hour before signing, one ms apart per token (sessions for the lag mode
    # are created before that, so a consent-revoked event revokes them).
    base_ms = (now - 3600) * 1000
    job = (kind, fingerprint, now, base_ms, "consent-revoked")
    procs = int(os.environ.get("BENCH_SIGN_PROCS", "2"))
    chunk = 2000
    ranges = [(s, min(s + chunk, count)) for s in range(0, count, chunk)]
    started = time.time()
    print(f"presign: signing {count} {kind} notifications on {procs} processes ...", file=sys.stderr, flush=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f, multiprocessing.Pool(procs, initializer=_init, initargs=(pem_path, job)) as pool:
        for lines in pool.imap(_sign_range, ranges):
            f.write("\n".join(lines))
            f.write("\n")
    os.replace(tmp, path)
    with open(meta_path, "w") as f:
        json.dump({"iat": now, "count": count, "kind": kind, "bytes": os.path.getsize(path),
                   "event_time_base_ms": base_ms}, f)
    print(f"presign: {count} bodies in {time.time() - started:.1f} s -> {path}", file=sys.stderr, flush=True)
    return path


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "key":
        _, pem, jwks, fp = ensure_key(sys.argv[2])
        print(jwks)
    elif len(sys.argv) == 5 and sys.argv[1] in ("sign", "sign-once"):
        print(sign(sys.argv[2], sys.argv[3], int(sys.argv[4]), any_age=sys.argv[1] == "sign-once"))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
