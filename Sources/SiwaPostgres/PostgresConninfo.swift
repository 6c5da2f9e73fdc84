import CPostgres

/// A conninfo (URI or `key=value` list) as libpq reads it, without connecting.
public enum PostgresConninfo {
    /// Every option libpq would use for `conninfo`: its own values (`PQconninfoParse`: URI
    /// decoding, quoting and aliases as libpq does them), and for the options it leaves out,
    /// libpq's defaults as a connection would take them (`PQconndefaults`: the `PG*` environment
    /// variables, then the built-in ones such as `sslmode=prefer`). nil when libpq cannot parse it.
    public static func options(_ conninfo: String) -> [String: String]? {
        var options: [String: String] = [:]
        if let defaults = PQconndefaults() {
            collect(defaults, into: &options)
            PQconninfoFree(defaults)
        }
        var error: UnsafeMutablePointer<CChar>?
        guard let parsed = PQconninfoParse(conninfo, &error) else {
            if let error { PQfreemem(error) }
            return nil
        }
        collect(parsed, into: &options)
        PQconninfoFree(parsed)
        return options
    }

    private static func collect(_ list: UnsafeMutablePointer<PQconninfoOption>, into options: inout [String: String]) {
        var option = list
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { options[String(cString: keyword)] = String(cString: value) }
            option += 1
        }
    }
}
