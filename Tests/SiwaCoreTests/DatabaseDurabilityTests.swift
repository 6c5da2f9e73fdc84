import Testing

@testable import SiwaCore

@Suite struct DatabaseDurabilityTests {
    func durability(
        _ commit: String = "on", names: String = "", sync: Int? = 0, async: Int? = 0, role: String = "siwa"
    ) -> DatabaseDurability {
        DatabaseDurability(
            synchronousCommit: commit, synchronousStandbyNames: names, synchronousStandbys: sync, asynchronousStandbys: async,
            role: role)
    }

    @Test("a commit that waits for an attached synchronous standby survives a failover: no warning")
    func synchronous() {
        for commit in ["on", "remote_apply", "remote_write"] {
            let d = durability(commit, names: "ANY 1 (s1, s2)", sync: 2, async: 1)
            #expect(d.promise == .standby)
            #expect(d.metricValue == 2)
            #expect(d.warning == nil)
            #expect(d.summary.contains("2 synchronous standbys") && d.summary.contains("survives a failover"))
        }
    }

    @Test("standbys streaming asynchronously: a failover may lose events answered 200, with a warning")
    func asynchronous() {
        let plain = durability(names: "", sync: 0, async: 2)
        #expect(plain.promise == .asynchronous && plain.metricValue == 0)
        #expect(plain.warning?.contains("a failover may lose events answered 200") == true)
        // synchronous_commit=local: the names are set, a sync standby is attached, the commit does not wait for it.
        let local = durability("local", names: "*", sync: 1, async: 0)
        #expect(local.promise == .asynchronous && local.metricValue == 0 && local.warning != nil)
    }

    @Test("no standby: as durable as this server; names set without a standby: commits wait, a warning")
    func single() {
        let alone = durability()
        #expect(alone.promise == .thisServer && alone.warning == nil && alone.metricValue == 0)
        let waiting = durability(names: "s1", sync: 0, async: 0)
        #expect(waiting.promise == .waitingForStandby && waiting.warning?.contains("no synchronous standby is attached") == true)
        let blankNames = durability(names: "  ", sync: 0, async: 1)
        #expect(blankNames.promise == .asynchronous)
    }

    @Test("synchronous_commit=off: a crash may lose commits, whatever the standbys")
    func off() {
        let d = durability("off", names: "*", sync: 1, async: 0)
        #expect(d.promise == .notFlushed && d.metricValue == 0 && d.warning?.contains("crash") == true)
    }

    @Test("replication states not readable: unknown, names the grant, metric -1, no warning")
    func unknown() {
        let d = durability(names: "*", sync: nil, async: nil, role: "siwa_recv")
        #expect(d.promise == .unknown && d.metricValue == -1 && d.warning == nil)
        #expect(d.summary.contains("unknown — grant pg_read_all_stats to siwa_recv"))
    }
}
