import Testing

@testable import SiwaCore

/// The AWS credential's sources as the SDKs look for them, and the shared credentials file,
/// including bad ones: every problem names the variable to fix and never repeats a secret.
@Suite struct AWSCredentialsTests {
    static let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"

    func resolve(_ environment: [String: String]) throws(ConfigurationError) -> AWSCredentialSource {
        try AWSCredentialSource.resolve(environment: environment)
    }

    func problem(_ environment: [String: String]) -> ConfigurationError? {
        do {
            _ = try resolve(environment)
            return nil
        } catch {
            return error
        }
    }

    func problem(file: String, profile: String = "default") -> ConfigurationError? {
        do {
            _ = try AWSCredentialSource.parseSharedFile(file, profile: profile)
            return nil
        } catch {
            return error
        }
    }

    @Test("the key variables win over a file; a session token goes with them; empty counts as unset")
    func environmentKeys() throws {
        #expect(
            try resolve(["AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": Self.secret, "AWS_SHARED_CREDENTIALS_FILE": "/f"])
                == .environment(.init(accessKeyID: "AK", secretAccessKey: Self.secret)))
        #expect(
            try resolve(["AWS_ACCESS_KEY_ID": " AK ", "AWS_SECRET_ACCESS_KEY": Self.secret, "AWS_SESSION_TOKEN": "T"])
                == .environment(.init(accessKeyID: "AK", secretAccessKey: Self.secret, sessionToken: "T")))
        #expect(
            try resolve(["AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SHARED_CREDENTIALS_FILE": "/f"])
                == .sharedFile(path: "/f", profile: "default"))
    }

    @Test("a key without its secret, or a secret or token alone, names the missing variable")
    func halfSet() {
        #expect(problem(["AWS_ACCESS_KEY_ID": "AK"])?.variable == "AWS_SECRET_ACCESS_KEY")
        #expect(problem(["AWS_SECRET_ACCESS_KEY": Self.secret])?.variable == "AWS_ACCESS_KEY_ID")
        #expect(problem(["AWS_SESSION_TOKEN": "T", "HOME": "/root"])?.variable == "AWS_SESSION_TOKEN")
        let alone = problem(["AWS_SECRET_ACCESS_KEY": Self.secret])
        #expect(alone.map { !"\($0)".contains(Self.secret) } == true)
    }

    @Test("without keys: the file and profile named, else ~/.aws/credentials and default; nothing at all is an error")
    func fileSource() {
        #expect(
            (try? resolve(["AWS_SHARED_CREDENTIALS_FILE": "/etc/aws", "AWS_PROFILE": "siwa"])) == .sharedFile(path: "/etc/aws", profile: "siwa"))
        #expect((try? resolve(["HOME": "/home/app/"])) == .sharedFile(path: "/home/app/.aws/credentials", profile: "default"))
        #expect(problem([:])?.variable == "AWS_ACCESS_KEY_ID")
        #expect(AWSCredentialSource.sharedFile(path: "/f", profile: "p").variable == "AWS_SHARED_CREDENTIALS_FILE")
        #expect(AWSCredentialSource.environment(.init(accessKeyID: "A", secretAccessKey: "S")).variable == "AWS_ACCESS_KEY_ID")
    }

    static let file = """
        # written by aws configure
        [default]
        aws_access_key_id = AKIADEFAULT
        aws_secret_access_key = defaultsecret

        ; the one siwa-notify uses
        [siwa]
        aws_access_key_id=AKIASIWA
        aws_secret_access_key =  \(secret)
        aws_session_token = tok
        region = eu-west-1
        """

    @Test("the profile's three values are read, other names and profiles ignored")
    func parsesProfiles() throws {
        #expect(
            try AWSCredentialSource.parseSharedFile(Self.file, profile: "siwa")
                == .init(accessKeyID: "AKIASIWA", secretAccessKey: Self.secret, sessionToken: "tok"))
        #expect(
            try AWSCredentialSource.parseSharedFile(Self.file, profile: "default")
                == .init(accessKeyID: "AKIADEFAULT", secretAccessKey: "defaultsecret"))
        #expect(
            try AWSCredentialSource.parseSharedFile("[p]\r\naws_access_key_id = A\r\naws_secret_access_key = S\r\n", profile: "p")
                == .init(accessKeyID: "A", secretAccessKey: "S"))
    }

    @Test(
        "a bad file says which line or which value, never the secret",
        arguments: [
            ("[siwa]\naws_access_key_id = A\n\(secret)\n", "line 3: is neither [profile] nor name = value"),
            ("aws_secret_access_key = \(secret)\n[siwa]\n", "line 1: name = value before any [profile]"),
            ("[siwa\naws_secret_access_key = \(secret)\n", "line 1: a section header must be [name]"),
            (
                "[siwa]\naws_access_key_id = A\naws_secret_access_key = \(secret)\naws_secret_access_key = x\n",
                "line 4: aws_secret_access_key is given twice in [siwa]"
            ),
            ("[siwa]\naws_access_key_id = A\naws_secret_access_key =\n", "line 3: aws_secret_access_key is empty"),
            ("[siwa]\naws_secret_access_key = \(secret)\n", "[siwa] has no aws_access_key_id"),
            ("[siwa]\naws_access_key_id = A\n", "[siwa] has no aws_secret_access_key"),
        ])
    func badFiles(text: String, expected: String) throws {
        let error = try #require(problem(file: text, profile: "siwa"))
        #expect(error.variable == "AWS_SHARED_CREDENTIALS_FILE")
        #expect(error.problem == expected)
        #expect(!"\(error)".contains(Self.secret))
    }

    @Test("a profile the file lacks names AWS_PROFILE; another profile's secret is not in the message")
    func missingProfile() throws {
        let error = try #require(problem(file: Self.file, profile: "prod"))
        #expect(error.variable == "AWS_PROFILE")
        #expect(error.problem == "the credentials file has no [prod] profile")
        #expect(problem(file: "", profile: "default")?.variable == "AWS_PROFILE")
    }
}
