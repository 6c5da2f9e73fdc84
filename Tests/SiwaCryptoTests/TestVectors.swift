// Test vectors generated once with the OpenSSL 3 command-line tool (not with
// SiwaCrypto), so verifying them checks interoperability:
//
//   openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out key.pem
//   openssl rsa -in key.pem -traditional -out key_trad.pem
//   printf '%s' "$MESSAGE" > msg.txt
//   openssl dgst -sha256 -sign key.pem -out sig.bin msg.txt
//   (n, e, signature base64url-encoded as in a JWK / JWS)
//
// THROWAWAY TEST KEYS ONLY. They protect nothing.

enum Vectors {
    /// JWS signing input (base64url header "." base64url payload).
    static let message = "eyJhbGciOiJSUzI1NiIsImtpZCI6InRlc3Qta2lkIn0.eyJpc3MiOiJodHRwczovL2FwcGxlaWQuYXBwbGUuY29tIiwiYXVkIjoiY29tLmV4YW1wbGUuYXBwIn0"

    /// JWK "n" of the signing key (2048-bit).
    static let jwkN =
        "mzZBAefxtzpYifkO3F9nntGC74Ays9jycCB6LKmc8_9fj152wktwxSbw3FSeXhsi" + "Z8APOde1vO3syhoQUdMMQXdAJq6gZ8fYTNFusPbuZudjWQ9--CIQg_4pqzzYwWaf"
        + "9_RFu5T-Vu908auaQiJ3CBJ9BaeeK1JNgx9DYbLpn9ot0qMSG_lW49Gp3V7cTMKy" + "PxbcruACntZegp5BJPgEl9_0y-8D_9hxMhkO6xaU35MZhCGbMWjfh10JIWba1wCf"
        + "Pg-o5UsGgfsPrdH4MfRySjd-awBcG7nT6FHS8JuIJ6fW07qzsm9Iwi4o6JuCfHsu" + "epNI3HLX5rK92UnTGfWJDQ"

    /// JWK "e".
    static let jwkE = "AQAB"

    /// RS256 signature of `message`, base64url.
    static let signature =
        "KAhjcyZqimPvrV_cnQvv9gABlBzE4IMXXN7eb11SAH-vRgS-a2MJRMvQcIx-2a8i" + "MRIBuUhCh73OJjyKZuQsWtbhF6H4GxwwbPjHO3tcN65d0K2AofnMVLLg7lT3XjhP"
        + "9PTspuZrHqmXY2KSIitXS0Qmkqc7876KxHohbHe7Dahdzm_A6otz7FSkQpEkOX8f" + "_rhCSZY8GIh9S_lUdzRkp4Wqq9ewXZ0T7vJpw55f984nrHaPeXP2IEdNdSQcAbl7"
        + "BfFjjyC7iRGZrR7MZ3yCk4Rzcypk7PU2eZ_qIV2OlTeNPKi4MlMleUQBBb1g3EmO" + "hWkKV7_W4xXyl2TDrbeHVg"

    /// The same key, PKCS#1 ("BEGIN RSA PRIVATE KEY").
    static let pkcs1PrivateKeyPEM = """
        -----BEGIN RSA PRIVATE KEY-----
        MIIEpAIBAAKCAQEAmzZBAefxtzpYifkO3F9nntGC74Ays9jycCB6LKmc8/9fj152
        wktwxSbw3FSeXhsiZ8APOde1vO3syhoQUdMMQXdAJq6gZ8fYTNFusPbuZudjWQ9+
        +CIQg/4pqzzYwWaf9/RFu5T+Vu908auaQiJ3CBJ9BaeeK1JNgx9DYbLpn9ot0qMS
        G/lW49Gp3V7cTMKyPxbcruACntZegp5BJPgEl9/0y+8D/9hxMhkO6xaU35MZhCGb
        MWjfh10JIWba1wCfPg+o5UsGgfsPrdH4MfRySjd+awBcG7nT6FHS8JuIJ6fW07qz
        sm9Iwi4o6JuCfHsuepNI3HLX5rK92UnTGfWJDQIDAQABAoIBACBapJ3uWNliOPMX
        3vRqkcnOMB5XKZqKUm0zo+wb9ir5lJSo8xYIzkrWlXZEUFfbDaa1ZyceU1S8/vNZ
        EAZSeVdLMazukWLYynqm3I1Yh/Uc7j1yKLw2M52kFVEL574W86km+wNBaWw7UbQP
        2qHHF+tvmS6c1HCA4UYANhZPSnpm2CqZu2eSpGsJ3P9WlYdclIIfCKQalxlcvRpe
        wvVF1S53sfQXU4UUR/j0pW9q7PS/2lCwJ4GHF+XapxgWc995a/GSASNEgAM68lV0
        n0Jpjumv1xJCqhqvR8CwVypTRR2MQ7KWL0mB2EngU6HjFPPkz9IA4ZoNbqsPDsP+
        6RiPXDECgYEAzXAgAfk5JNylQkdcA4+3Lgc+xUaJWMKsf0XOAS9PyKkPgah+EsFc
        NDby1Y8+Dt/m/oI8KcDQ86P4eWgpqhf1utzwM+aTLAhebdtq3JYX11gOoJoXobs3
        3Z1tGbiEhDjqrMP/61QHtxHGiuFW+UwPYz7bJF78ZPTXHMRyuCmQGb0CgYEAwWmS
        5vXMpJ+yA5SwQG/ppKupGR/St6vxAj6x0hnMrFfjC46kfKkLYEksEp1KRutlO54P
        NYI3OpkpVlz/26OgWP0NXEhH31ousW70ezEbugP4m71vSXP+bISxS/Pp2IWoI5qa
        VWQme4fVFiM2jzukDw29Mzv+APbRzvte1yaZmZECgYEAjqmpoJU4qK+NF7zEWjjI
        JW+kmIyGPpxZ+7w29b2sMxWsDgc7Hb0nUZ9C/SkPGHdGS0GXlAsxT7BzkaPTIyqm
        W5CoQfKCC1b4dGOmDu8wOTwOVFsNxCNmBUEYjX8Ej2mTFky6AOsGvIvci382zcKT
        AQGaXuSTc2xPocuOOvOp/SUCgYAktbwbODYiXOk1wsf9QwCOr8JFsYOWNv1klq+7
        mAgAAiJm9CkGPDObj+fclJwff9hUC3kJh/Chn6Z37OjnMFRj74vUoyd5Hi3UoaGn
        rDd+A/jw3nC7+VcmE71vFBmjbiLutw5p/LtNIQfxzrcxUnmeHdZ2XgGk/zPtXEqw
        /XOT8QKBgQCofC9EYWNffd7eS8+Y6gP3bilKvhEdWRt2CWhHw1kbh3XyKY2jetQr
        53zc2lPbfOgtVrrRSP5xWZfTdVlPfNiwKBZAFCZKeOH0rqhLBQ9ctKnpZWhDE9RZ
        x2Si6HZQx8H7KljLBOIhWrRhIpGp6pmzmDZC/6noUEFmm4uLoy2B/A==
        -----END RSA PRIVATE KEY-----
        """

    /// Its public key as SubjectPublicKeyInfo PEM (not a private key).
    static let publicKeyPEM = """
        -----BEGIN PUBLIC KEY-----
        MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAmzZBAefxtzpYifkO3F9n
        ntGC74Ays9jycCB6LKmc8/9fj152wktwxSbw3FSeXhsiZ8APOde1vO3syhoQUdMM
        QXdAJq6gZ8fYTNFusPbuZudjWQ9++CIQg/4pqzzYwWaf9/RFu5T+Vu908auaQiJ3
        CBJ9BaeeK1JNgx9DYbLpn9ot0qMSG/lW49Gp3V7cTMKyPxbcruACntZegp5BJPgE
        l9/0y+8D/9hxMhkO6xaU35MZhCGbMWjfh10JIWba1wCfPg+o5UsGgfsPrdH4MfRy
        Sjd+awBcG7nT6FHS8JuIJ6fW07qzsm9Iwi4o6JuCfHsuepNI3HLX5rK92UnTGfWJ
        DQIDAQAB
        -----END PUBLIC KEY-----
        """

    /// A 512-bit RSA key, PKCS#8 encrypted with passphrase "secret".
    static let encryptedPrivateKeyPEM = """
        -----BEGIN ENCRYPTED PRIVATE KEY-----
        MIIBvTBXBgkqhkiG9w0BBQ0wSjApBgkqhkiG9w0BBQwwHAQIgE9+ch5aaJQCAggA
        MAwGCCqGSIb3DQIJBQAwHQYJYIZIAWUDBAECBBD7oiYY4tVIZWKwfvTNpWblBIIB
        YJZo3cikQGnCRzssOZlX7U2Ujq6/Xap7nDhUUKBMzpDuUjKozIutSgwbAmCgWGMq
        mZAwXBRJONbq7WbHVFE4SDxUOX785r7D+YdDzEdvCHIkezlOeax4pFr4eh0jtezt
        N/opykyPuP0iUCxHfeK3HSyNqPDWRse2HFVWntiN5WYG6SLarX39R+lSyRN7esKP
        vkEz7NzeRxFnW6oPN1w2lDfvOt1Na1tCxNSlvNBKcDeHgsy8bHF92by5SoL+BmPH
        pke+O6GCkaSLtoPxMx71yaI9h29JijOL8Ks7ln/pH+ZwjlwL0Jec1Z2FsCMahwQb
        DiaLJlVB6ZvfW6cDi2TbNScg0onVMbulBAG91TsyBzKREKxQG1eeCQPsQL6nlCu6
        ZLpLEAq9EYPd5dwANeGv24VZ0Z3bIex+24QWzaNI4sXW2/Icp18sJ82kJVMLycvn
        RBzDMvaC3cPjkk2asstu48k=
        -----END ENCRYPTED PRIVATE KEY-----
        """

    /// A P-256 EC private key (PKCS#8): valid PEM, wrong key type.
    static let ecPrivateKeyPEM = """
        -----BEGIN PRIVATE KEY-----
        MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgEhhCsN8TEq3ft+py
        ev3PhBSmktofk7wIjV+5/t1RpQOhRANCAATurVxOoSw3KYBfRqXY1iNLnBhACZvk
        Frs6et3yf7/LeVfJmZC+rnOn3JJwg0C1cJbzW1kB3wcuKGCyI+faCOXp
        -----END PRIVATE KEY-----
        """
}
