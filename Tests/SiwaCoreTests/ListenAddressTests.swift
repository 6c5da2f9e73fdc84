import Testing

@testable import SiwaCore

@Suite struct ListenAddressTests {
    @Test func parsesValidAddresses() {
        #expect(ListenAddress.parse("0.0.0.0:8080") == ListenAddress(host: "0.0.0.0", port: 8080))
        #expect(ListenAddress.parse("127.0.0.1:0") == ListenAddress(host: "127.0.0.1", port: 0))
        #expect(ListenAddress.parse("[::1]:9090") == ListenAddress(host: "::1", port: 9090))
        #expect(ListenAddress.parse("localhost:80") == ListenAddress(host: "localhost", port: 80))
        #expect(ListenAddress.parse("LocalHost:80") == ListenAddress(host: "localhost", port: 80))
        #expect(ListenAddress.parse("255.255.255.255:65535") == ListenAddress(host: "255.255.255.255", port: 65535))
        #expect(ListenAddress.parse("[::]:443") == ListenAddress(host: "::", port: 443))
        #expect(ListenAddress.parse("[2001:DB8::1]:1") == ListenAddress(host: "2001:db8::1", port: 1))
        #expect(ListenAddress.parse("[::ffff:127.0.0.1]:1")?.host == "::ffff:127.0.0.1")
        #expect(ListenAddress.parse("[1:2:3:4:5:6:7:8]:1") != nil)
    }

    @Test func rejectsInvalidAddresses() {
        let bad = [
            "", ":8080", "8080", "0.0.0.0", "0.0.0.0:", "0.0.0.0:65536", "0.0.0.0:-1", "0.0.0.0:+80", "0.0.0.0:8o",
            "0.0.0.0:123456", "256.0.0.1:80", "1.2.3:80", "1.2.3.4.5:80", "01.2.3.4:80", "1..3.4:80", "example.com:80",
            "::1:80", "[::1]", "[::1]80", "[::1:80", "[:::1]:80", "[1:2:3:4:5:6:7:8:9]:80", "[1::2::3]:80", "[g::1]:80",
            "[::1%eth0]:80", "[12345::]:80", "localhost", " 127.0.0.1:80", "127.0.0.1:80 ", "localhost.:80", "[127.0.0.1]:80",
            "[1:2:3:4:5:6:7]:80",
        ]
        for text in bad {
            #expect(ListenAddress.parse(text) == nil, "\(text)")
        }
    }

    @Test func loopback() {
        for text in ["127.0.0.1:1", "127.255.0.9:1", "[::1]:1", "[0:0:0:0:0:0:0:1]:1", "localhost:1", "[::ffff:127.0.0.1]:1"] {
            #expect(ListenAddress.parse(text)?.isLoopback == true, "\(text)")
        }
        for text in ["0.0.0.0:1", "10.0.0.1:1", "128.0.0.1:1", "[::]:1", "[::2]:1", "[2001:db8::1]:1", "[::ffff:10.0.0.1]:1"] {
            #expect(ListenAddress.parse(text)?.isLoopback == false, "\(text)")
        }
    }

    @Test func unspecified() {
        #expect(ListenAddress.parse("0.0.0.0:1")?.isUnspecified == true)
        #expect(ListenAddress.parse("[::]:1")?.isUnspecified == true)
        #expect(ListenAddress.parse("127.0.0.1:1")?.isUnspecified == false)
    }

    @Test func descriptionRoundTrips() {
        for text in ["0.0.0.0:8080", "127.0.0.1:0", "[::1]:9090", "localhost:80", "[2001:db8::1]:443"] {
            let address = ListenAddress.parse(text)
            #expect(address?.description == text)
            #expect(ListenAddress.parse(address?.description ?? "") == address)
        }
    }
}
