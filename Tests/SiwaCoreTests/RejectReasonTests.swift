import Testing

@testable import SiwaCore

@Suite struct RejectReasonTests {
    @Test func statusCodes() {
        let expected: [RejectReason: Int] = [
            .malformedJSON: 400, .missingPayload: 400, .malformedJWS: 400, .malformedHeader: 400, .malformedClaims: 400,
            .missingJTI: 400, .malformedEvents: 400, .missingSub: 400, .missingType: 400, .badEventTime: 400,
            .unsupportedAlgorithm: 401, .missingKid: 401, .unknownKid: 401, .badSignature: 401, .wrongIssuer: 401,
            .wrongAudience: 401, .expired: 401, .issuedInFuture: 401, .missingIAT: 401,
            .notFound: 404, .methodNotAllowed: 405, .bodyTooLarge: 413, .unsupportedMediaType: 415,
            .databaseUnavailable: 503, .keysUnavailable: 503, .internalError: 500,
        ]
        #expect(expected.count == RejectReason.allCases.count)
        for reason in RejectReason.allCases {
            #expect(reason.httpStatus == expected[reason], "\(reason)")
        }
    }

    @Test func rawValues() {
        #expect(RejectReason.unsupportedAlgorithm.rawValue == "unsupported_alg")
        #expect(RejectReason.missingJTI.rawValue == "missing_jti")
        #expect(RejectReason.malformedJSON.rawValue == "malformed_json")
        #expect(RejectReason(rawValue: "bad_signature") == .badSignature)
        #expect(RejectReason.missingIAT.rawValue == "missing_iat")
        #expect(RejectReason.badEventTime.rawValue == "bad_event_time")
        #expect(Set(RejectReason.allCases.map(\.rawValue)).count == RejectReason.allCases.count)
        for reason in RejectReason.allCases {
            #expect(reason.rawValue.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || $0 == UInt8(ascii: "_") })
        }
    }

    @Test func responseBodyIsJSON() throws {
        #expect(RejectReason.expired.responseBody == #"{"error":"expired"}"#)
        for reason in RejectReason.allCases {
            #expect(try JSONParser.parse(reason.responseBody) == .object(["error": .string(reason.rawValue)]))
        }
    }

    @Test func summariesAreShortSentences() {
        var seen = Set<String>()
        for reason in RejectReason.allCases {
            let s = reason.summary
            #expect(!s.isEmpty && s.count < 100, "\(reason)")
            #expect(s.hasSuffix("."), "\(reason)")
            #expect(!s.contains("\n"))
            seen.insert(s)
        }
        #expect(seen.count == RejectReason.allCases.count)
    }
}
