import Testing

@testable import SiwaCore

/// The hosted providers' pure core: which effect an event queues, when a call is retried or
/// given up, the configuration and the start-up line.
@Suite("Hosted providers: rules, schedule, configuration")
struct ProviderRulesTests {
    let t: Int64 = 1_750_000_000_000

    func effect(
        _ type: EventType, outcome: ApplyOutcome, revoke: SessionRevocation = .none, status: AccountStatus = .active,
        policy: AccountDeletePolicy = .unlink
    ) -> ProviderEffect? {
        let decision = AccountDecision(
            newState: AccountState(status: status), accountChanged: true, revokeSessions: revoke, revokeReason: nil, outcome: outcome)
        return ProviderRules.effect(of: AppleEvent(type: type, sub: "s", eventTimeMillis: t), decision: decision, policy: policy)
    }

    @Test("consent-revoked that took effect ends sessions; a stale one (older than a sign-in) does nothing")
    func consent() {
        #expect(effect(.consentRevoked, outcome: .applied, revoke: .createdAtOrBefore(t), status: .consentRevoked) == .endSessions)
        #expect(effect(.consentRevoked, outcome: .stale, revoke: .createdAtOrBefore(t)) == nil)
    }

    @Test("a deletion that took effect unlinks, or deletes with delete-user; a stale one or one after the deletion: nothing")
    func deletion() {
        #expect(effect(.accountDelete, outcome: .applied, revoke: .all, status: .deleted) == .unlink)
        #expect(effect(.deletionRequested, outcome: .applied, revoke: .all, status: .deleted) == .unlink)
        #expect(effect(.accountDelete, outcome: .applied, revoke: .all, status: .deleted, policy: .deleteUser) == .deleteUser)
        #expect(effect(.deletionRequested, outcome: .applied, revoke: .all, status: .deleted, policy: .deleteUser) == .deleteUser)
        #expect(effect(.accountDelete, outcome: .stale, revoke: .createdAtOrBefore(t)) == nil)
        #expect(effect(.accountDelete, outcome: .finalDeleted, revoke: .all, status: .deleted) == nil)
        #expect(effect(.accountDelete, outcome: .finalDeleted, status: .deleted, policy: .deleteUser) == nil)
    }

    @Test("sign-ins, email events and unknown types queue nothing")
    func nothing() {
        #expect(effect(.signIn, outcome: .applied) == nil)
        #expect(effect(.emailDisabled, outcome: .applied) == nil)
        #expect(effect(.emailEnabled, outcome: .applied) == nil)
        #expect(effect(.unknown("x"), outcome: .ignored) == nil)
    }

    /// Property over arrival orders (the worker's own decisions, event-time order, deletion final):
    /// - a call is queued only for an event no applied sign-in is newer than (stale does nothing);
    /// - an unlink is queued exactly when the user becomes deleted;
    /// - when the user ends deleted, the last call queued is the unlink: the provider ends with
    ///   the Apple identity gone whatever order the events came in;
    /// - nothing is queued for a user already deleted, unless a newer sign-in came back first.
    @Test func anyArrivalOrderQueuesOnlyWhatTookEffect() {
        var rng = SplitMix(seed: 0x9_2042)
        let aud = AppAccountRulesTests.a
        for _ in 0..<5000 {
            let events = AppAccountRulesTests.randomEvents(
                [.signIn, .consentRevoked, .emailDisabled, .accountDelete, .deletionRequested], &rng
            ).shuffled(using: &rng)
            let trace = events.map { "\($0.type.rawValue)@\($0.eventTimeMillis)" }
            var state = UserState()
            var newestSignIn: Int64 = .min
            var calls: [ProviderEffect] = []
            var failed = false
            for event in events {
                let wasDeleted = state.user?.status == .deleted
                let decision = AppAccountRules.apply(event, audience: aud, to: state)
                let queued = ProviderRules.effect(of: event, decision: decision.user, policy: .unlink)
                let becameDeleted = !wasDeleted && decision.user.newState.status == .deleted
                if event.type == .signIn && decision.user.outcome == .applied { newestSignIn = max(newestSignIn, event.eventTimeMillis) }
                if queued != nil && event.eventTimeMillis < newestSignIn { failed = true }
                if (queued == .unlink) != becameDeleted { failed = true }
                if wasDeleted && decision.user.newState.status == .deleted && queued != nil { failed = true }
                if let queued { calls.append(queued) }
                state = UserState(user: decision.user.newState, apps: state.apps.merging(decision.apps) { _, new in new })
                #expect(!failed, "\(trace)")
                if failed { return }
            }
            if state.user?.status == .deleted {
                #expect(calls.last == .unlink, "\(trace)")
                if calls.last != .unlink { return }
            }
        }
    }

    // MARK: - Schedule

    let schedule = ProviderCallSchedule(
        retryFor: .seconds(3600), backoff: RetryPolicy(maxAttempts: .max, baseDelay: .seconds(2), maxDelay: .seconds(600)))

    @Test("done and a user the provider does not know are final; throttling and 5xx retry with backoff, never before Retry-After")
    func retries() {
        #expect(schedule.next(after: .done([.signedOut], status: 200), attempts: 1, age: .seconds(0), jitter: 0) == .done)
        #expect(schedule.next(after: .userNotFound(status: 404), attempts: 1, age: .seconds(0), jitter: 0) == .userUnknown)
        let throttled = ProviderFailure(status: 429, reason: "http_429")
        #expect(schedule.next(after: .retryLater(throttled), attempts: 1, age: .seconds(0), jitter: 0) == .retry(after: .seconds(1)))
        #expect(schedule.next(after: .retryLater(throttled), attempts: 3, age: .seconds(0), jitter: 0.99) == .retry(after: .seconds(4 + 0.99 * 4)))
        var later = throttled
        later.retryAfter = .seconds(30)
        #expect(schedule.next(after: .retryLater(later), attempts: 1, age: .seconds(0), jitter: 0) == .retry(after: .seconds(30)))
        // The last retry comes at the bound; past it, or asked for after it, the call is dead.
        #expect(schedule.next(after: .retryLater(throttled), attempts: 12, age: .seconds(3500), jitter: 0.5) == .retry(after: .seconds(100)))
        #expect(schedule.next(after: .retryLater(throttled), attempts: 12, age: .seconds(3600), jitter: 0) == .dead)
        #expect(schedule.next(after: .retryLater(later), attempts: 1, age: .seconds(3590), jitter: 0) == .dead)
    }

    @Test("a provider's wait is believed up to the schedule's longest wait, then the backoff and the bound decide")
    func providerWaitBounded() {
        var far = ProviderFailure(status: 429, reason: "http_429")
        far.retryAfter = .seconds(100_000)
        #expect(schedule.next(after: .retryLater(far), attempts: 1, age: .zero, jitter: 0) == .retry(after: .seconds(3600)))
        var short = schedule
        short.longestWait = .seconds(60)
        #expect(short.next(after: .retryLater(far), attempts: 1, age: .zero, jitter: 0) == .retry(after: .seconds(60)))
        // The provider's pause: the later of the two, bounded the same way.
        let spent = ProviderRateLimit(remaining: 0, reset: .seconds(30))
        let now = Duration.seconds(1_000)
        #expect(ProviderCallSchedule.pause(until: .zero, after: spent, status: 200, now: now) == .seconds(1_030))
        #expect(ProviderCallSchedule.pause(until: .seconds(2_000), after: spent, status: 200, now: now) == .seconds(2_000))
        #expect(ProviderCallSchedule.pause(until: .zero, after: ProviderRateLimit(remaining: 4), status: 200, now: now) == .zero)
        #expect(
            ProviderCallSchedule.pause(until: .zero, after: ProviderRateLimit(retryAfter: .seconds(1 << 32)), status: 429, now: now)
                == .seconds(4_600))
    }

    @Test("an unlink or deletion that finds no user is already done when an earlier call found the user")
    func secondUnlink() {
        let missing = ProviderOutcome.userNotFound(status: 404)
        #expect(ProviderRules.settled(missing, effect: .unlink, foundBefore: true) == .done([.alreadyDone], status: 404))
        #expect(ProviderRules.settled(missing, effect: .deleteUser, foundBefore: true) == .done([.alreadyDone], status: 404))
        #expect(ProviderRules.settled(missing, effect: .unlink, foundBefore: false) == missing)
        #expect(ProviderRules.settled(missing, effect: .endSessions, foundBefore: true) == missing)
        let throttled = ProviderOutcome.retryLater(ProviderFailure(status: 429, reason: "http_429"))
        #expect(ProviderRules.settled(throttled, effect: .unlink, foundBefore: true) == throttled)
    }

    @Test("a refused request is dead at once; a refused credential, permission or tenant waits for the fix until the bound")
    func refusals() {
        let request = ProviderFailure(status: 400, reason: "InvalidParameterException", blame: .request)
        #expect(schedule.next(after: .refused(request), attempts: 1, age: .seconds(0), jitter: 0) == .dead)
        #expect(schedule.next(after: .refused(ProviderFailure(reason: "x")), attempts: 1, age: .seconds(0), jitter: 0) == .dead)
        for blame in [ProviderBlame.credential, .permission, .tenant] {
            let refused = ProviderOutcome.refused(ProviderFailure(status: 401, reason: "r", blame: blame))
            #expect(schedule.next(after: refused, attempts: 2, age: .seconds(10), jitter: 0) == .retry(after: .seconds(2)))
            #expect(schedule.next(after: refused, attempts: 2, age: .seconds(3600), jitter: 0) == .dead)
        }
    }

    // MARK: - Configuration

    func load(_ env: [String: String]) throws(ConfigurationError) -> ServerConfiguration {
        try ServerConfiguration.load(environment: env.merging(["SIWA_AUDIENCES": "com.example.app", "HOME": "/home/siwa"]) { a, _ in a })
    }

    func problem(_ env: [String: String]) -> String? {
        do {
            _ = try load(env)
            return nil
        } catch {
            return error.description
        }
    }

    @Test("SIWA_APPLY_TO takes the providers beside the libraries; each provider's variables are read")
    func configuration() throws {
        let both = try load([
            "SIWA_APPLY_TO": "cognito, supabase", "SIWA_COGNITO_USER_POOL_ID": "eu-west-1_ABC", "AWS_ACCESS_KEY_ID": "AKID",
            "AWS_SECRET_ACCESS_KEY": "secret",
        ])
        #expect(both.authLibraries.targets == [.supabase])
        #expect(both.hostedProviders.targets == [.cognito])
        #expect(
            both.hostedProviders.cognito
                == .init(
                    userPoolID: "eu-west-1_ABC", region: "eu-west-1",
                    credentials: .environment(SigV4.Credentials(accessKeyID: "AKID", secretAccessKey: "secret")), url: nil))
        let file = try load([
            "SIWA_APPLY_TO": "cognito", "SIWA_COGNITO_USER_POOL_ID": "local_pool", "SIWA_COGNITO_REGION": "us-east-1",
            "SIWA_COGNITO_URL": "http://127.0.0.1:5000/",
        ]).hostedProviders.cognito
        #expect(file?.region == "us-east-1" && file?.url == "http://127.0.0.1:5000/")
        #expect(file?.credentials == .sharedFile(path: "/home/siwa/.aws/credentials", profile: "default"))
        let all = try load([
            "SIWA_APPLY_TO": "clerk,auth0,firebase", "SIWA_FIREBASE_PROJECT_ID": "p", "SIWA_FIREBASE_URL": "http://localhost:9099/",
            "SIWA_AUTH0_DOMAIN": "t.eu.auth0.com", "SIWA_AUTH0_CLIENT_ID": "c", "SIWA_AUTH0_CLIENT_SECRET_FILE": "/s",
            "SIWA_CLERK_SECRET_KEY_FILE": "/k",
        ]).hostedProviders
        #expect(all.targets == [.firebase, .auth0, .clerk])
        #expect(all.firebase == .init(projectID: "p", credentialsFile: nil, url: "http://localhost:9099/"))
        #expect(all.auth0 == .init(domain: "t.eu.auth0.com", clientID: "c", clientSecretFile: "/s", url: nil))
        #expect(all.clerk == .init(secretKeyFile: "/k", url: nil))
        // A provider not named is not read.
        #expect(try load(["SIWA_COGNITO_URL": "http://cognito.example.com/"]).hostedProviders == HostedProviderConfiguration())
    }

    @Test("a missing or malformed variable stops the start with one line naming it")
    func refusedConfiguration() {
        let cognito = ["SIWA_APPLY_TO": "cognito", "AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s"]
        #expect(problem(cognito)?.hasPrefix("SIWA_COGNITO_USER_POOL_ID: is required with SIWA_APPLY_TO=cognito") == true)
        #expect(problem(cognito.merging(["SIWA_COGNITO_USER_POOL_ID": "nopool"]) { a, _ in a })?.hasPrefix("SIWA_COGNITO_REGION:") == true)
        #expect(
            problem(cognito.merging(["SIWA_COGNITO_USER_POOL_ID": "eu-west-1_A", "SIWA_COGNITO_REGION": "eu/west"]) { a, _ in a })?
                .hasPrefix("SIWA_COGNITO_REGION:") == true)
        #expect(
            problem(cognito.merging(["SIWA_COGNITO_USER_POOL_ID": "eu-west-1_A", "SIWA_COGNITO_URL": "http://cognito.example.com/"]) { a, _ in a })?
                .hasPrefix("SIWA_COGNITO_URL:") == true)
        #expect(
            problem(["SIWA_APPLY_TO": "cognito", "SIWA_COGNITO_USER_POOL_ID": "eu-west-1_A", "AWS_ACCESS_KEY_ID": "AKID"])?
                .hasPrefix("AWS_SECRET_ACCESS_KEY:") == true)
        #expect(problem(["SIWA_APPLY_TO": "firebase", "SIWA_FIREBASE_PROJECT_ID": "p"])?.hasPrefix("SIWA_FIREBASE_CREDENTIALS_FILE:") == true)
        #expect(problem(["SIWA_APPLY_TO": "firebase", "SIWA_FIREBASE_CREDENTIALS_FILE": "/f"])?.hasPrefix("SIWA_FIREBASE_PROJECT_ID:") == true)
        #expect(
            problem(["SIWA_APPLY_TO": "auth0", "SIWA_AUTH0_DOMAIN": "https://t.auth0.com/", "SIWA_AUTH0_CLIENT_ID": "c"])?
                .hasPrefix("SIWA_AUTH0_DOMAIN:") == true)
        #expect(problem(["SIWA_APPLY_TO": "clerk"])?.hasPrefix("SIWA_CLERK_SECRET_KEY_FILE:") == true)
        #expect(
            problem(["SIWA_APPLY_TO": "clerk", "SIWA_CLERK_SECRET_KEY_FILE": "/k", "SIWA_CLERK_URL": "ftp://x"])?.hasPrefix("SIWA_CLERK_URL:")
                == true)
        #expect(
            problem(["SIWA_APPLY_TO": "okta"])
                == #"SIWA_APPLY_TO: "okta" is not one of supabase, better-auth, authjs, firebase, auth0, clerk, cognito"#)
    }

    @Test("the start-up line names the variable to fix: credential, permission, tenant, address; a pass is nil")
    func startProblem() throws {
        let config = try load([
            "SIWA_APPLY_TO": "cognito", "SIWA_COGNITO_USER_POOL_ID": "eu-west-1_A", "AWS_SHARED_CREDENTIALS_FILE": "/creds",
        ]).hostedProviders
        func line(_ outcome: ProviderOutcome) -> String? { config.startProblem(.cognito, outcome)?.description }
        #expect(line(.done([], status: 200)) == nil)
        #expect(
            line(.refused(ProviderFailure(status: 400, reason: "UnrecognizedClientException", blame: .credential)))
                == "AWS_SHARED_CREDENTIALS_FILE: cognito refused the credential: UnrecognizedClientException (HTTP 400) [credential]")
        #expect(
            line(.refused(ProviderFailure(status: 400, reason: "AccessDeniedException", blame: .permission)))?.hasPrefix(
                "AWS_SHARED_CREDENTIALS_FILE: ") == true)
        #expect(
            line(.refused(ProviderFailure(status: 400, reason: "ResourceNotFoundException", blame: .tenant)))?.hasPrefix(
                "SIWA_COGNITO_USER_POOL_ID: ") == true)
        #expect(line(.retryLater(ProviderFailure(reason: "couldNotConnect")))?.hasPrefix("SIWA_COGNITO_URL: cognito did not answer") == true)
        #expect(
            line(.refused(ProviderFailure(status: 400, reason: "SerializationException", blame: .request)))?.hasPrefix("SIWA_COGNITO_URL: ") == true)
    }
}
