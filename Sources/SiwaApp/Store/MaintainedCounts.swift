/// SQL fragments that read the counts schema.sql maintains ("Maintained counts"): the folded
/// totals plus the changes not folded yet, read at one snapshot, so exact without reading the
/// counted tables.
enum MaintainedCounts {
    /// Every counted name with its part of the count (a name may have several rows: add them).
    static let rows = "(SELECT name, n FROM siwa.counts UNION ALL SELECT name, n FROM siwa.count_changes) AS counted"

    /// A scalar subquery: the count of `name` (an SQL expression), 0 when none was counted.
    static func sum(_ name: String) -> String {
        "(SELECT coalesce(pg_catalog.sum(n), 0)::bigint FROM \(rows) WHERE name = \(name))"
    }
}
