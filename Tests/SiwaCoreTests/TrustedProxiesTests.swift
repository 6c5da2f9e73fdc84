import Testing

@testable import SiwaCore

@Suite struct TrustedProxiesTests {
    @Test("SIWA_TRUSTED_PROXIES: IPs and CIDR blocks, v4 and v6; default none; a bad entry names the variable")
    func parse() throws {
        let none = try ServerConfiguration.load(environment: ["SIWA_AUDIENCES": "a"], overrides: [:], dev: false)
        #expect(none.trustedProxies.isEmpty)
        let proxies = try ServerConfiguration.load(
            environment: ["SIWA_AUDIENCES": "a", "SIWA_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.7 ,fd00::/8"], overrides: [:], dev: false
        ).trustedProxies
        #expect(proxies.contains("10.200.3.4") && proxies.contains("192.168.1.7") && proxies.contains("fd12::1"))
        #expect(!proxies.contains("11.0.0.1") && !proxies.contains("192.168.1.8") && !proxies.contains("fe80::1"))
        #expect(proxies.contains("::ffff:10.1.2.3"), "an IPv4 peer as a dual-stack listener reports it")
        #expect(!proxies.contains("not-an-ip"))
        let flag = try ServerConfiguration.load(
            environment: ["SIWA_AUDIENCES": "a", "SIWA_TRUSTED_PROXIES": "10.0.0.1"], overrides: ["SIWA_TRUSTED_PROXIES": "10.0.0.2"], dev: false)
        #expect(flag.trustedProxies.contains("10.0.0.2") && !flag.trustedProxies.contains("10.0.0.1"))
        for bad in ["10.0.0.0/33", "proxy.internal", "10.0.0.1/", "10.0.0.1/x", "::/129", "10.0.0.256", "10.0.0.0/-1"] {
            do {
                _ = try ServerConfiguration.load(
                    environment: ["SIWA_AUDIENCES": "a", "SIWA_TRUSTED_PROXIES": bad], overrides: [:], dev: false)
                Issue.record("\(bad) accepted")
            } catch {
                #expect(error.variable == "SIWA_TRUSTED_PROXIES", "\(bad)")
                #expect(!error.description.contains("\n"))
            }
        }
        let zero = try TrustedProxies.parse("0.0.0.0/0")
        #expect(zero.contains("203.0.113.9") && !zero.contains("2001:db8::1"))
        let odd = try TrustedProxies.parse("10.0.0.128/25")
        #expect(odd.contains("10.0.0.200") && !odd.contains("10.0.0.127"))
    }

    @Test("the client: the peer unless it is a trusted proxy; then the right-most untrusted X-Forwarded-For entry")
    func client() throws {
        let proxies = try TrustedProxies.parse("10.0.0.0/8")
        // Not from a trusted proxy: the header is the client's own words.
        #expect(proxies.clientAddress(peer: "203.0.113.9", forwardedFor: ["198.51.100.1"]) == "203.0.113.9")
        #expect(TrustedProxies.none.clientAddress(peer: "10.0.0.1", forwardedFor: ["198.51.100.1"]) == "10.0.0.1")
        // From a trusted proxy: the entry it appended; what the client wrote to the left is ignored.
        #expect(proxies.clientAddress(peer: "10.0.0.1", forwardedFor: ["1.1.1.1, 198.51.100.7"]) == "198.51.100.7")
        // Chained proxies: skip every trusted hop, from the right; several header lines in order.
        #expect(proxies.clientAddress(peer: "10.0.0.1", forwardedFor: ["1.1.1.1, 198.51.100.7", "10.9.9.9"]) == "198.51.100.7")
        // Every hop trusted: the left-most.
        #expect(proxies.clientAddress(peer: "10.0.0.1", forwardedFor: ["10.1.1.1, 10.2.2.2"]) == "10.1.1.1")
        // No header from a trusted proxy: the proxy itself.
        #expect(proxies.clientAddress(peer: "10.0.0.1", forwardedFor: []) == "10.0.0.1")
        // A hop that is not an address: the proxy that wrote it is the client as far as we know.
        #expect(proxies.clientAddress(peer: "10.0.0.1", forwardedFor: ["198.51.100.7, garbage"]) == "10.0.0.1")
        #expect(proxies.clientAddress(peer: "10.0.0.1", forwardedFor: ["garbage, 10.2.2.2"]) == "10.2.2.2")
        #expect(proxies.clientAddress(peer: nil, forwardedFor: ["198.51.100.7"]) == nil)
    }
}
