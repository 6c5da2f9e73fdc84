// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "siwa-notify",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "siwa-notify", targets: ["siwa-notify"])
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        // C libraries: one system-library target each (module map + shim header).
        .systemLibrary(
            name: "CMicroHTTPD", pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(
            name: "CPostgres", pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"])]),
        .systemLibrary(
            name: "CCurl", pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(
            name: "CCrypto", pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]),

        // Pure core: parsing, verification rules, event rules. No C, no I/O.
        .target(name: "SiwaCore"),

        // The release's version (stamped by scripts/release) and the commit, generated at build time.
        .target(name: "SiwaBuildInfo", plugins: ["StampCommit"]),
        .plugin(name: "StampCommit", capability: .buildTool()),

        // Thin Swift wrappers, one per C library.
        .target(name: "SiwaCrypto", dependencies: ["CCrypto"]),
        .target(name: "SiwaPostgres", dependencies: ["CPostgres", "SiwaCore", "SiwaClock"]),

        // The one monotonic clock and the waits on it, below the database wrapper and the runtime.
        .target(name: "SiwaClock", dependencies: ["SiwaCore"]),

        // The runtime: services and their shutdown budget, the connected loop and the call loop
        // (lease -> call -> record) every background loop is built from (re-exports SiwaClock:
        // the clock and the waits with deadlines).
        .target(
            name: "SiwaRuntime",
            dependencies: ["SiwaCore", "SiwaClock", "SiwaPostgres", .product(name: "Logging", package: "swift-log")]),
        .target(name: "SiwaHTTP", dependencies: ["CMicroHTTPD", "SiwaCore", "SiwaRuntime"]),
        .target(name: "SiwaFetch", dependencies: ["CCurl"]),

        // Composition: receiver, worker, key store, outbox, embedded database.
        .target(
            name: "SiwaApp",
            dependencies: [
                "SiwaCore", "SiwaCrypto", "SiwaHTTP", "SiwaPostgres", "SiwaFetch", "SiwaRuntime", "SiwaBuildInfo",
                .product(name: "Logging", package: "swift-log"),
            ],
            resources: [
                // schema.sql (a symlink to the repository root's) compiled into the binary.
                .embedInCode("Resources/schema.sql"),
                // docs/openapi.json (generated from docs/openapi.yaml), served at GET /openapi.json.
                .embedInCode("Resources/openapi.json"),
            ]),

        // Development tools: the fake Apple (`dev-apple`) and the notification signer (`simulate`).
        // Used by the CLI and the tests, never by the product library.
        .target(name: "SiwaDevTools", dependencies: ["SiwaCore", "SiwaCrypto", "SiwaHTTP", "SiwaFetch", "SiwaRuntime"]),

        // The one executable.
        .executableTarget(
            name: "siwa-notify",
            dependencies: [
                "SiwaApp", "SiwaDevTools", "SiwaRuntime", "SiwaBuildInfo",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]),

        // Test-only helpers (e.g. a Standard Webhooks receiver that checks forwards): never in the product.
        .target(name: "SiwaTestSupport", dependencies: ["SiwaCore", "SiwaCrypto", "SiwaHTTP"], path: "Tests/SiwaTestSupport"),

        .testTarget(name: "SiwaCoreTests", dependencies: ["SiwaCore"]),
        .testTarget(name: "SiwaCryptoTests", dependencies: ["SiwaCrypto", "SiwaFetch", "SiwaCore"]),
        .testTarget(
            name: "SiwaIntegrationTests",
            dependencies: [
                "SiwaApp", "SiwaDevTools", "SiwaCore", "SiwaCrypto", "SiwaFetch", "SiwaPostgres", "SiwaHTTP", "SiwaRuntime",
                "SiwaTestSupport", "SiwaBuildInfo",
                .product(name: "Logging", package: "swift-log"),
            ],
            // Read through #filePath (a database made by the previous release), not bundled.
            exclude: ["Fixtures"]),
        // In-process tier: the receiver's decisions and the lifecycle, no sockets, no database.
        .testTarget(
            name: "SiwaAppTests",
            dependencies: [
                "SiwaApp", "SiwaDevTools", "SiwaCore", "SiwaHTTP", "SiwaCrypto", "SiwaPostgres", "SiwaRuntime",
                .product(name: "Logging", package: "swift-log"),
            ]),
        // The runtime without sockets or a database: a manual clock, fake connections.
        .testTarget(
            name: "SiwaRuntimeTests", dependencies: ["SiwaRuntime", "SiwaCore", .product(name: "Logging", package: "swift-log")]),
    ],
    swiftLanguageModes: [.v6]
)
