import ConsentDomain
import LedgerFormat
import LedgerStorage
import TransparencyLog

// MARK: - Catalogue versions

/// A catalogue version and where it took effect.
public struct CatalogVersion: Sendable {
    public let seq: UInt64
    public let at: Timestamp
    public let catalog: Catalog
    /// The `catalog.published` event, or nil for the genesis catalogue.
    public let published: CatalogPublished?
}

extension Ledger {
    /// Every catalogue version of the log: the genesis catalogue, then each published one, from
    /// the ledger's own stream. Call with derived data current.
    func catalogVersions(_ view: LogView) throws -> [CatalogVersion] {
        try catalogVersions(try streamEntries(SubjectMap.ledgerStream, view))
    }

    /// The catalogue versions of the ledger stream's events.
    func catalogVersions(_ ledgerStream: [StreamEntry]) throws -> [CatalogVersion] {
        var versions = [CatalogVersion(seq: 0, at: genesisTime, catalog: catalog, published: nil)]
        for entry in ledgerStream where entry.seq > 0 {
            guard case .catalogPublished(let published) = entry.record.event.payload else {
                throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: entry.seq + 1, seq: UInt64(entry.seq), problem: "a ledger event after the genesis event is not a published catalogue"))
            }
            if version < 2 { try checkSignature(entry.record, line: entry.seq + 1) }
            try checkCatalogHash(published, seq: UInt64(entry.seq))
            versions.append(CatalogVersion(seq: entry.record.event.seq, at: entry.record.event.at, catalog: published.catalog, published: published))
        }
        return versions
    }

    /// A published catalogue's `catalog` member must be the SHA-256 of its canonical bytes.
    func checkCatalogHash(_ published: CatalogPublished, seq: UInt64) throws {
        guard chain.hasher.sha256(CatalogCodec.canonicalBytes(published.catalog)).hex == published.catalogHash else {
            throw ConsentError.integrity(IntegrityFailure(line: Int(seq) + 1, seq: seq, problem: "the published catalogue's SHA-256 differs from its 'catalog' member"))
        }
    }

    /// The catalogue in force for an event at `seq`: the newest version published before it.
    static func catalog(in versions: [CatalogVersion], before seq: UInt64) -> Catalog {
        versions.last { $0.seq < seq }?.catalog ?? versions[0].catalog
    }

    /// The catalogue in force at a time (the newest one when `at` is nil).
    static func catalog(in versions: [CatalogVersion], at: Timestamp?) -> Catalog {
        guard let at else { return versions.last!.catalog }
        return versions.last { $0.at <= at }?.catalog ?? versions[0].catalog
    }

    /// The catalogue versions of the ledger, oldest first.
    public func catalogHistory() throws -> [CatalogVersion] {
        try reading { view in try catalogVersions(view) }
    }
}
