// The clock and the waits with deadlines live one target lower (SiwaClock), where the database
// pool can use them too; every user of the runtime gets them with it.
@_exported import SiwaClock
