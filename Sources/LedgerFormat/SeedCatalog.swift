import TransparencyLog
import ConsentDomain

/// The seed's catalogue (Medication Management and Timeline), the same as `Samples/catalog.json`;
/// `consentctl init` uses it when no `--catalog` is given. A test keeps the two identical.
public enum SeedCatalog {
    public static let json = #"""
{
  "features": [
    {
      "code": 1,
      "key": "medication-management",
      "name": { "en": "Medication Management", "de": "Medikamentenverwaltung" },
      "consents": [
        {
          "code": "required",
          "name": { "en": "MedicationManagement required consent", "de": "Medikamentenverwaltung: erforderliche Zustimmung" },
          "required": true,
          "link": "https://consentledger.example/notices/medication-management/required",
          "version": "1.0"
        },
        {
          "code": "optional-a",
          "name": { "en": "MedicationManagement optional consent A", "de": "Medikamentenverwaltung: optionale Zustimmung A" },
          "required": false,
          "link": "https://consentledger.example/notices/medication-management/optional-a",
          "version": "1.0"
        },
        {
          "code": "optional-b",
          "name": { "en": "MedicationManagement optional consent B", "de": "Medikamentenverwaltung: optionale Zustimmung B" },
          "required": false,
          "link": "https://consentledger.example/notices/medication-management/optional-b",
          "version": "1.0"
        }
      ]
    },
    {
      "code": 2,
      "key": "timeline",
      "name": { "en": "Timeline", "de": "Zeitachse" },
      "consents": [
        {
          "code": "required",
          "name": { "en": "Timeline required consent", "de": "Zeitachse: erforderliche Zustimmung" },
          "required": true,
          "link": "https://consentledger.example/notices/timeline/required",
          "version": "1.0"
        },
        {
          "code": "optional-a",
          "name": { "en": "Timeline optional consent A", "de": "Zeitachse: optionale Zustimmung A" },
          "required": false,
          "link": "https://consentledger.example/notices/timeline/optional-a",
          "version": "1.0"
        },
        {
          "code": "optional-b",
          "name": { "en": "Timeline optional consent B", "de": "Zeitachse: optionale Zustimmung B" },
          "required": false,
          "link": "https://consentledger.example/notices/timeline/optional-b",
          "version": "1.0"
        }
      ]
    }
  ]
}
"""#

    public static var catalog: Catalog {
        // The text above is a constant that a test decodes; it cannot fail here.
        try! CatalogCodec.decode(Array(json.utf8))
    }
}
