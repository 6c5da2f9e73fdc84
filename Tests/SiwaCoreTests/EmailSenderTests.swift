import Testing

@testable import SiwaCore

/// The email services' pure core: which effect an event queues, each service's requests and how
/// their answers read, the configuration and the start-up line.
@Suite("Email senders: rules, requests, answers, configuration")
struct EmailSenderTests {
    let t: Int64 = 1_750_000_000_000
    static let relay = "abc@privaterelay.appleid.com"

    func effect(
        _ type: EventType, outcome: ApplyOutcome = .applied, email: String? = relay, isPrivate: Bool? = true, all: Bool = false,
        before: AccountState? = nil
    ) -> (SenderEffect, String?)? {
        let decision = AccountDecision(
            newState: AccountState(status: .active), accountChanged: true, revokeSessions: .none, revokeReason: nil, outcome: outcome)
        let event = AppleEvent(type: type, sub: "s", eventTimeMillis: t, email: email, isPrivateEmail: isPrivate)
        return EmailSenderRules.effect(of: event, decision: decision, allAddresses: all, before: before).map { ($0.effect, $0.address) }
    }

    @Test("email-disabled suppresses and email-enabled lifts a relay address; stale or final ones do nothing")
    func emailEvents() {
        #expect(effect(.emailDisabled)! == (.suppress, Self.relay))
        #expect(effect(.emailEnabled)! == (.unsuppress, Self.relay))
        #expect(effect(.emailDisabled, outcome: .stale) == nil)
        #expect(effect(.emailEnabled, outcome: .finalDeleted) == nil)
        #expect(effect(.emailDisabled, outcome: .ignored) == nil)
        #expect(effect(.emailDisabled, email: nil) == nil)
        #expect(effect(.emailDisabled, email: "") == nil)
    }

    @Test("a relay address: either relay domain, or marked private whatever its domain; a real one only with all addresses")
    func relayAddresses() {
        #expect(effect(.emailDisabled, email: "x@private.icloud.com", isPrivate: nil)! == (.suppress, "x@private.icloud.com"))
        #expect(effect(.emailDisabled, email: "x@PrivateRelay.AppleID.com", isPrivate: false) != nil)
        #expect(effect(.emailDisabled, email: "x@new-relay.apple.example", isPrivate: true) != nil)
        #expect(effect(.emailDisabled, email: "x@example.com", isPrivate: false) == nil)
        #expect(effect(.emailDisabled, email: "x@example.com", isPrivate: nil) == nil)
        #expect(effect(.emailDisabled, email: "privaterelay.appleid.com@example.com", isPrivate: false) == nil)
        #expect(effect(.emailDisabled, email: "x@example.com", isPrivate: false, all: true)! == (.suppress, "x@example.com"))
    }

    @Test("a deletion that took effect erases, with the user's relay address before it; nothing else queues anything")
    func deletion() {
        let before = AccountState(status: .active, email: Self.relay, isPrivateEmail: true)
        #expect(effect(.accountDelete, email: nil, before: before)! == (.erase, Self.relay))
        #expect(effect(.deletionRequested, email: nil, before: before)! == (.erase, Self.relay))
        #expect(effect(.accountDelete, email: nil, before: nil)! == (.erase, nil))
        let real = AccountState(status: .active, email: "x@example.com", isPrivateEmail: false)
        #expect(effect(.accountDelete, email: nil, before: real)! == (.erase, nil))
        #expect(effect(.accountDelete, email: nil, all: true, before: real)! == (.erase, "x@example.com"))
        #expect(effect(.accountDelete, outcome: .stale, email: nil, before: before) == nil)
        #expect(effect(.accountDelete, outcome: .finalDeleted, email: nil, before: before) == nil)
        #expect(effect(.consentRevoked) == nil)
        #expect(effect(.signIn) == nil)
        #expect(effect(.unknown("x")) == nil)
    }

    @Test("targets and effects read back from their stored names")
    func names() {
        for target in CallTarget.all { #expect(CallTarget(rawValue: target.rawValue) == target) }
        #expect(CallTarget(rawValue: "ses") == .sender(.ses) && CallTarget(rawValue: "auth0") == .provider(.auth0))
        #expect(CallTarget(rawValue: "resend") == nil)
        #expect(CallEffect(rawValue: "erase") == .sender(.erase) && CallEffect(rawValue: "unlink") == .provider(.unlink))
        #expect(
            SuppressionEntry.parse(lines: "a@x\t\nb@y\toutbound") == [.init(address: "a@x", scope: ""), .init(address: "b@y", scope: "outbound")])
        #expect(SuppressionEntry.parse(lines: nil) == [])
    }

    // MARK: - Requests

    static let entry = SuppressionEntry(address: "a+b@privaterelay.appleid.com", scope: "")

    @Test("SES v2: the account-level list, the address one path segment, reason BOUNCE")
    func ses() throws {
        let api = SESSuppressionAPI()
        #expect(
            api.lookup(Self.entry)
                == SenderRequest(operation: "lookup", method: "GET", path: "/v2/email/suppression/addresses/a%2Bb%40privaterelay.appleid.com"))
        #expect(api.remove(Self.entry).method == "DELETE" && api.remove(Self.entry).path == api.lookup(Self.entry).path)
        let add = api.add(Self.entry)
        #expect(add.method == "PUT" && add.path == "/v2/email/suppression/addresses")
        let body = try JSONParser.parse(add.json ?? [])
        #expect(body["EmailAddress"]?.stringValue == Self.entry.address && body["Reason"]?.stringValue == "BOUNCE")
        #expect(
            api.presence(body: Array(#"{"SuppressedDestination":{"EmailAddress":"a","Reason":"BOUNCE","LastUpdateTime":1}}"#.utf8))
                == .present(removable: true))
        #expect(api.presence(body: Array("{}".utf8)) == nil)
        #expect(api.classify(status: 404, headers: [:], body: [], now: 0) == .notFound)
        let refused = api.classify(status: 403, headers: ["x-amzn-errortype": "UnrecognizedClientException:http://x"], body: [], now: 0)
        #expect(refused == .failed(.refused(ProviderFailure(status: 403, reason: "UnrecognizedClientException", blame: .credential))))
        let denied = api.classify(status: 403, headers: ["x-amzn-errortype": "AccessDeniedException:"], body: [], now: 0)
        #expect(denied == .failed(.refused(ProviderFailure(status: 403, reason: "AccessDeniedException", blame: .permission))))
        let throttled = api.classify(status: 429, headers: ["retry-after": "3"], body: [], now: 0)
        #expect(throttled == .failed(.retryLater(ProviderFailure(status: 429, reason: "http_429", retryAfter: .seconds(3)))))
    }

    @Test("SendGrid: global suppressions; {} is absent")
    func sendgrid() throws {
        let api = SendGridSuppressionAPI()
        #expect(api.lookup(Self.entry).path == "/v3/asm/suppressions/global/a%2Bb%40privaterelay.appleid.com")
        let add = api.add(Self.entry)
        #expect(add.method == "POST" && add.path == "/v3/asm/suppressions/global")
        #expect(try JSONParser.parse(add.json ?? [])["recipient_emails"]?.arrayValue == [.string(Self.entry.address)])
        #expect(api.presence(body: Array("{}".utf8)) == .absent)
        #expect(api.presence(body: Array(#"{"recipient_email":"a@b"}"#.utf8)) == .present(removable: true))
        #expect(api.presence(body: Array("[]".utf8)) == nil)
        #expect(
            api.classify(status: 401, headers: [:], body: [], now: 0)
                == .failed(.refused(ProviderFailure(status: 401, reason: "http_401", blame: .credential))))
        let spent = api.classify(status: 429, headers: ["x-ratelimit-remaining": "0", "x-ratelimit-reset": "110"], body: [], now: 100)
        #expect(spent == .failed(.retryLater(ProviderFailure(status: 429, reason: "http_429", retryAfter: .seconds(10)))))
    }

    @Test("Postmark: per stream; a per-address Failed is not applied; a spam complaint is not removable; its error codes")
    func postmark() throws {
        let api = PostmarkSuppressionAPI(streams: ["outbound", "broad cast"])
        let entry = SuppressionEntry(address: "a@b", scope: "broad cast")
        #expect(
            api.lookup(entry)
                == SenderRequest(
                    operation: "lookup", method: "GET", path: "/message-streams/broad%20cast/suppressions/dump", query: [.init("EmailAddress", "a@b")]
                ))
        #expect(api.add(entry).path == "/message-streams/broad%20cast/suppressions")
        #expect(api.remove(entry).path == "/message-streams/broad%20cast/suppressions/delete" && api.remove(entry).method == "POST")
        #expect(try JSONParser.parse(api.add(entry).json ?? [])["Suppressions"]?.arrayValue?.first?["EmailAddress"]?.stringValue == "a@b")
        #expect(api.presence(body: Array(#"{"Suppressions":[]}"#.utf8)) == .absent)
        #expect(
            api.presence(body: Array(#"{"Suppressions":[{"EmailAddress":"a@b","SuppressionReason":"SpamComplaint"}]}"#.utf8))
                == .present(removable: false))
        #expect(api.applied(body: Array(#"{"Suppressions":[{"EmailAddress":"a@b","Status":"Failed"}]}"#.utf8)) == false)
        #expect(api.applied(body: Array(#"{"Suppressions":[{"EmailAddress":"a@b","Status":"Deleted"}]}"#.utf8)) == true)
        #expect(api.applied(body: Array("{}".utf8)) == nil)
        let stream = api.classify(status: 422, headers: [:], body: Array(#"{"ErrorCode":1226,"Message":"x"}"#.utf8), now: 0)
        #expect(stream == .failed(.refused(ProviderFailure(status: 422, reason: "postmark_1226", blame: .tenant))))
        let token = api.classify(status: 401, headers: [:], body: Array(#"{"ErrorCode":10,"Message":"x"}"#.utf8), now: 0)
        #expect(token == .failed(.refused(ProviderFailure(status: 401, reason: "postmark_10", blame: .credential))))
        #expect(api.probes().map(\.path) == ["/message-streams/outbound/suppressions/dump", "/message-streams/broad%20cast/suppressions/dump"])
    }

    @Test("Mailgun: per domain, form body with tag *; a domain not found is the configuration's fault, an address not found is absent")
    func mailgun() {
        let api = MailgunSuppressionAPI(domains: ["mg.example.com"])
        let entry = SuppressionEntry(address: "a@b", scope: "mg.example.com")
        #expect(api.lookup(entry).path == "/v3/mg.example.com/unsubscribes/a%40b")
        #expect(
            api.add(entry)
                == SenderRequest(
                    operation: "add", method: "POST", path: "/v3/mg.example.com/unsubscribes", form: [.init("address", "a@b"), .init("tag", "*")]))
        #expect(
            api.classify(status: 404, headers: [:], body: Array(#"{"message":"Address not found in unsubscribers table"}"#.utf8), now: 0) == .notFound
        )
        let domain = api.classify(status: 404, headers: [:], body: Array(#"{"message":"Domain not found: mg.x"}"#.utf8), now: 0)
        #expect(domain == .failed(.refused(ProviderFailure(status: 404, reason: "domain_not_found", blame: .tenant))))
    }

    // MARK: - Configuration

    func load(_ env: [String: String]) throws(ConfigurationError) -> EmailSenderConfiguration {
        try EmailSenderConfiguration.load({ env[$0] }, environment: env)
    }

    @Test("each service's variables; defaults; a missing or malformed one names itself")
    func configuration() throws {
        #expect(try load([:]) == EmailSenderConfiguration())
        let all = try load([
            "SIWA_EMAIL_SENDERS": "mailgun, ses,postmark,sendgrid", "SIWA_SES_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "AKID",
            "AWS_SECRET_ACCESS_KEY": "s", "SIWA_SENDGRID_API_KEY_FILE": "/k", "SIWA_SENDGRID_URL": "https://api.eu.sendgrid.com",
            "SIWA_POSTMARK_SERVER_TOKEN_FILE": "/t", "SIWA_MAILGUN_API_KEY_FILE": "/m", "SIWA_MAILGUN_DOMAINS": "a.example.com,b.example.com",
            "SIWA_MAILGUN_URL": "https://api.eu.mailgun.net/", "SIWA_EMAIL_SENDERS_ALL_ADDRESSES": "true",
        ])
        #expect(all.targets == [.ses, .sendgrid, .postmark, .mailgun] && all.allAddresses)
        #expect(all.postmark?.streams == ["outbound"] && all.mailgun?.domains == ["a.example.com", "b.example.com"])
        let streams = try load([
            "SIWA_EMAIL_SENDERS": "postmark", "SIWA_POSTMARK_SERVER_TOKEN_FILE": "/t", "SIWA_POSTMARK_STREAMS": "outbound, my_stream-2",
        ])
        #expect(streams.postmark?.streams == ["outbound", "my_stream-2"])
        #expect(all.sendgrid?.url == "https://api.eu.sendgrid.com" && all.ses?.region == "eu-west-1")
        func problem(_ env: [String: String]) -> String {
            do throws(ConfigurationError) {
                _ = try load(env)
                return "loaded"
            } catch { return error.variable }
        }
        #expect(problem(["SIWA_EMAIL_SENDERS": "resend"]) == "SIWA_EMAIL_SENDERS")
        #expect(problem(["SIWA_EMAIL_SENDERS": "ses", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s"]) == "SIWA_SES_REGION")
        #expect(problem(["SIWA_EMAIL_SENDERS": "sendgrid"]) == "SIWA_SENDGRID_API_KEY_FILE")
        #expect(
            problem(["SIWA_EMAIL_SENDERS": "sendgrid", "SIWA_SENDGRID_API_KEY_FILE": "/k", "SIWA_SENDGRID_URL": "https://api.sendgrid.com/v3"])
                == "SIWA_SENDGRID_URL")
        #expect(
            problem(["SIWA_EMAIL_SENDERS": "sendgrid", "SIWA_SENDGRID_API_KEY_FILE": "/k", "SIWA_SENDGRID_URL": "http://api.sendgrid.com"])
                == "SIWA_SENDGRID_URL")
        #expect(
            problem(["SIWA_EMAIL_SENDERS": "sendgrid", "SIWA_SENDGRID_API_KEY_FILE": "/k", "SIWA_SENDGRID_URL": "http://127.0.0.1:9"]) == "loaded")
        #expect(problem(["SIWA_EMAIL_SENDERS": "mailgun", "SIWA_MAILGUN_API_KEY_FILE": "/m"]) == "SIWA_MAILGUN_DOMAINS")
        #expect(
            problem(["SIWA_EMAIL_SENDERS": "mailgun", "SIWA_MAILGUN_API_KEY_FILE": "/m", "SIWA_MAILGUN_DOMAINS": "a/b"]) == "SIWA_MAILGUN_DOMAINS")
        #expect(
            problem(["SIWA_EMAIL_SENDERS": "postmark", "SIWA_POSTMARK_SERVER_TOKEN_FILE": "/t", "SIWA_POSTMARK_STREAMS": ","])
                == "SIWA_POSTMARK_STREAMS")
        #expect(problem(["SIWA_EMAIL_SENDERS_ALL_ADDRESSES": "maybe"]) == "SIWA_EMAIL_SENDERS_ALL_ADDRESSES")
    }

    @Test("the start-up line names the credential's variable, the lists' or the address's")
    func startProblem() {
        var config = EmailSenderConfiguration(targets: [.sendgrid, .mailgun])
        config.ses = .init(region: "eu-west-1", credentials: .environment(SigV4.Credentials(accessKeyID: "a", secretAccessKey: "s")), url: nil)
        #expect(config.startProblem(.sendgrid, .done([], status: 200)) == nil)
        #expect(
            config.startProblem(.sendgrid, .refused(ProviderFailure(status: 401, reason: "http_401", blame: .credential)))?.variable
                == "SIWA_SENDGRID_API_KEY_FILE")
        #expect(config.startProblem(.ses, .refused(ProviderFailure(status: 403, reason: "x", blame: .credential)))?.variable == "AWS_ACCESS_KEY_ID")
        #expect(
            config.startProblem(.mailgun, .refused(ProviderFailure(status: 404, reason: "x", blame: .tenant)))?.variable == "SIWA_MAILGUN_DOMAINS")
        #expect(config.startProblem(.postmark, .retryLater(ProviderFailure(reason: "couldnt_connect")))?.variable == "SIWA_POSTMARK_URL")
    }
}

/// `doctor`'s findings on the email services: their start-up check's verdict.
@Suite("Email senders: doctor")
struct EmailSenderDoctorTests {
    @Test("a service that answers is INFO; a refused credential, an unknown list or no answer is HIGH, naming the variable")
    func findings() {
        let config = EmailSenderConfiguration(targets: [.postmark])
        func finding(_ check: DoctorFacts.Provider.Check) -> DoctorFinding {
            DoctorRules.sender(DoctorFacts.Sender(.postmark, check), config)
        }
        #expect(finding(.answered(.done([], status: 200))).code == "sender-check")
        let refused = finding(.answered(.refused(ProviderFailure(status: 401, reason: "postmark_10", blame: .credential))))
        #expect(refused.code == "sender-refused" && refused.severity == .high && refused.fix.contains("SIWA_POSTMARK_SERVER_TOKEN_FILE"))
        let stream = finding(.answered(.refused(ProviderFailure(status: 422, reason: "postmark_1226", blame: .tenant))))
        #expect(stream.fix.contains("SIWA_POSTMARK_STREAMS"))
        let down = finding(.answered(.retryLater(ProviderFailure(reason: "couldnt_connect"))))
        #expect(down.code == "sender-unreachable" && down.severity == .high && down.fix.contains("SIWA_POSTMARK_URL"))
        let unusable = finding(.unusable(ConfigurationError(variable: "SIWA_POSTMARK_SERVER_TOKEN_FILE", problem: "is empty")))
        #expect(unusable.code == "sender-credential" && unusable.severity == .high)
    }
}
