//! The sensitivity filter: files that hold secrets by name (`.env*`, keys, credential files) or
//! by content are skipped whole, so no byte of them reaches any artifact.
//!
//! The content rules follow the shape of gitleaks' rule set: provider token formats with their
//! fixed prefixes, private-key blocks, credentials inside URLs, webhook URLs, and assignments of a
//! high-entropy value to a secret-like name (checked by Shannon entropy, as gitleaks' generic rule
//! does).
//!
//! Why skip the file rather than redact the span: artifacts are line-addressed and the extract
//! stage re-reads the original lines from git to render them verbatim, so a redacted chunk would
//! either disagree with its source or the secret would come back at rendering; and a file that
//! holds one secret (a config, a deploy script) often holds others no rule knows. The file's path
//! and the kind of secret stay in the `skipped` table.

use regex::Regex;
use std::sync::OnceLock;

/// Bumped whenever the rules change, so that scans made under older rules are redone.
pub const RULES_VERSION: u32 = 5;

/// Why a file is sensitive, if it is, judged by its path alone.
pub fn sensitive_path(path: &str) -> Option<&'static str> {
    let lower = path.to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    if name == ".env" || name.starts_with(".env.") || name.ends_with(".env") {
        return Some("dotenv file");
    }
    if matches!(
        ext,
        "pem" | "key" | "p12" | "pfx" | "jks" | "keystore" | "kdbx" | "ppk" | "asc" | "gpg"
    ) {
        return Some("key or certificate file");
    }
    if ["id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"]
        .iter()
        .any(|k| name.starts_with(k))
    {
        return Some("ssh key");
    }
    let exact = [
        ".npmrc",
        ".pypirc",
        ".netrc",
        "_netrc",
        ".git-credentials",
        ".htpasswd",
        ".dockercfg",
        "credentials",
        "credentials.json",
        "credentials.yml",
        "credentials.yaml",
        "secrets.json",
        "secrets.yml",
        "secrets.yaml",
        "secrets.toml",
        "service-account.json",
        "terraform.tfvars",
        ".pgpass",
    ];
    if exact.contains(&name) {
        return Some("credential file");
    }
    if lower.contains(".aws/") || lower.contains(".ssh/") || lower.contains(".docker/config.json") {
        return Some("credential directory");
    }
    None
}

/// What else a rule's match must show before it counts.
#[derive(Clone, Copy)]
enum Check {
    /// The match is enough (a fixed provider prefix and format).
    None,
    /// The `secret` group must not be a placeholder (`$VAR`, `<password>`, `****`), and the
    /// `host` group not a name reserved for documentation (RFC 2606: `example.com`, `*.test`).
    UrlCredential,
    /// The `secret` group must look random: letters and digits, Shannon entropy of at least
    /// this many bits per character.
    Entropy(f64),
}

/// The content rules: kind, pattern, check.
const RULES: &[(&str, &str, Check)] = &[
    // A key body (a long base64 run) must follow the marker: documentation that shows the
    // marker with a placeholder such as `Kh9NV...` is not a key.
    (
        "private key block",
        r"-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----[\s\S]{0,300}?[A-Za-z0-9+/]{40,}",
        Check::None,
    ),
    (
        "putty private key",
        r"PuTTY-User-Key-File-[0-9]+:[\s\S]{0,400}?Private-Lines:",
        Check::None,
    ),
    (
        "age secret key",
        r"(?-u:\b)AGE-SECRET-KEY-1[0-9A-Z]{58}(?-u:\b)",
        Check::None,
    ),
    (
        "aws access key id",
        r"(?-u:\b)(AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}(?-u:\b)",
        Check::None,
    ),
    (
        "aws secret access key",
        r#"(?i)aws_?secret_?access_?key["']?\s*[:=]\s*["']?[A-Za-z0-9/+]{40}"#,
        Check::None,
    ),
    (
        "github token",
        r"(?-u:\b)gh[pousr]_[A-Za-z0-9]{36,}(?-u:\b)",
        Check::None,
    ),
    (
        "github fine-grained token",
        r"(?-u:\b)github_pat_[A-Za-z0-9_]{40,}(?-u:\b)",
        Check::None,
    ),
    (
        "gitlab token",
        r"(?-u:\b)glpat-[A-Za-z0-9_\-]{20,}(?-u:\b)",
        Check::None,
    ),
    (
        "slack token",
        r"(?-u:\b)xox[baprse]-[A-Za-z0-9-]{10,}(?-u:\b)",
        Check::None,
    ),
    (
        "slack webhook",
        r"https://hooks\.slack\.com/(services|workflows|triggers)/[A-Za-z0-9+/_\-]{20,}",
        Check::None,
    ),
    (
        "discord webhook",
        r"https://(ptb\.|canary\.)?discord(app)?\.com/api/webhooks/[0-9]{5,}/[A-Za-z0-9_\-]{20,}",
        Check::None,
    ),
    (
        "microsoft teams webhook",
        r"https://[a-z0-9\-]+\.webhook\.office\.com/webhookb2/[A-Za-z0-9@\-]{20,}/IncomingWebhook/[A-Za-z0-9]{20,}/[A-Za-z0-9\-]{20,}",
        Check::None,
    ),
    (
        "stripe key",
        r"(?-u:\b)[sr]k_(live|test|prod)_[0-9A-Za-z]{20,}(?-u:\b)",
        Check::None,
    ),
    (
        "google api key",
        r"(?-u:\b)AIza[0-9A-Za-z_\-]{35}(?-u:\b)",
        Check::None,
    ),
    (
        "google oauth client secret",
        r"(?-u:\b)GOCSPX-[A-Za-z0-9_\-]{28}(?-u:\b)",
        Check::None,
    ),
    (
        "npm token",
        r"(?-u:\b)npm_[A-Za-z0-9]{36}(?-u:\b)",
        Check::None,
    ),
    (
        "pypi token",
        r"(?-u:\b)pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}",
        Check::None,
    ),
    (
        "api secret key",
        r"(?-u:\b)sk-(proj-|ant-|svcacct-)?[A-Za-z0-9_\-]{32,}(?-u:\b)",
        Check::None,
    ),
    (
        "hugging face token",
        r"(?-u:\b)hf_[A-Za-z0-9]{34,}(?-u:\b)",
        Check::None,
    ),
    (
        "sendgrid api key",
        r"(?-u:\b)SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}(?-u:\b)",
        Check::None,
    ),
    (
        "twilio api key",
        r"(?-u:\b)SK[0-9a-f]{32}(?-u:\b)",
        Check::None,
    ),
    (
        "mailgun api key",
        r"(?-u:\b)key-[0-9a-f]{32}(?-u:\b)",
        Check::None,
    ),
    (
        "shopify token",
        r"(?-u:\b)shp(at|ca|pa|ss)_[a-fA-F0-9]{32}(?-u:\b)",
        Check::None,
    ),
    (
        "square token",
        r"(?-u:\b)sq0(atp|csp)-[0-9A-Za-z_\-]{22,43}(?-u:\b)",
        Check::None,
    ),
    (
        "digitalocean token",
        r"(?-u:\b)do[pro]_v1_[a-f0-9]{64}(?-u:\b)",
        Check::None,
    ),
    (
        "databricks token",
        r"(?-u:\b)dapi[a-f0-9]{32}(-[0-9]+)?(?-u:\b)",
        Check::None,
    ),
    (
        "postman api key",
        r"(?-u:\b)PMAK-[a-f0-9]{24}-[a-f0-9]{34}(?-u:\b)",
        Check::None,
    ),
    (
        "linear api key",
        r"(?-u:\b)lin_api_[A-Za-z0-9]{40}(?-u:\b)",
        Check::None,
    ),
    (
        "new relic key",
        r"(?-u:\b)NRAK-[A-Z0-9]{27}(?-u:\b)",
        Check::None,
    ),
    (
        "grafana token",
        r"(?-u:\b)(glc_[A-Za-z0-9+/]{32,}={0,2}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8})",
        Check::None,
    ),
    (
        "doppler token",
        r"(?-u:\b)dp\.pt\.[A-Za-z0-9]{43}(?-u:\b)",
        Check::None,
    ),
    (
        "vault token",
        r"(?-u:\b)hv[sb]\.[A-Za-z0-9_\-]{24,}",
        Check::None,
    ),
    (
        "terraform cloud token",
        r"(?-u:\b)[a-z0-9]{14}\.atlasv1\.[a-z0-9\-_=]{60,}",
        Check::None,
    ),
    (
        "telegram bot token",
        r"(?-u:\b)[0-9]{8,10}:AA[0-9A-Za-z_\-]{33}(?-u:\b)",
        Check::None,
    ),
    (
        "azure storage key",
        r"AccountKey=[A-Za-z0-9+/]{86}==",
        Check::None,
    ),
    (
        "json web token",
        r"(?-u:\b)eyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
        Check::None,
    ),
    (
        "error tracker dsn",
        r"https?://(?P<secret>[0-9a-f]{32})(:[0-9a-f]{32})?@[A-Za-z0-9.\-]*(sentry|ingest|glitchtip)[A-Za-z0-9.\-]*(:[0-9]+)?/[0-9]+",
        Check::None,
    ),
    (
        "container registry auth",
        r#"(?i)(\.dockerconfigjson["']?\s*:\s*["']?(?P<secret>[A-Za-z0-9+/=]{40,})|"auths"\s*:\s*\{[\s\S]{0,300}?"auth"\s*:\s*"[A-Za-z0-9+/=]{12,}")"#,
        Check::None,
    ),
    (
        "kubeconfig key data",
        r"(?i)(?-u:\b)(client-key-data|client-certificate-data)\s*:\s*[A-Za-z0-9+/=]{40,}",
        Check::None,
    ),
    (
        "credentials in url",
        r#"(?-u:\b)[A-Za-z][A-Za-z0-9+.\-]{1,20}://[^\s/:@'"<>()\[\]{}]{0,64}:(?P<secret>[^\s/'"<>()\[\]{}]{3,128})@(?P<host>[A-Za-z0-9][A-Za-z0-9.\-]*)"#,
        Check::UrlCredential,
    ),
    (
        "credentials on a command line",
        r#"(?i)(?-u:\b)curl(?-u:\b)[^\n]*?\s(-u|--user)[ =]\s*["']?[^\s:'"]{1,64}:(?P<secret>[^\s'"]{3,128})"#,
        Check::UrlCredential,
    ),
    (
        "credentials passed to an http client",
        r#"(?i)(?-u:\b)auth\s*=\s*(?:[A-Za-z_.]*auth)?\(\s*["'][^"'\n]{1,64}["']\s*,\s*["'](?P<secret>[^"'\n]{4,128})["']"#,
        Check::UrlCredential,
    ),
    (
        "password element",
        r"(?i)<(password|passwd|passphrase|secret|api[_\-]?key|token)>\s*(?P<secret>[^<\s]{4,128})\s*</",
        Check::UrlCredential,
    ),
    (
        "authorization header",
        r#"(?i)(?-u:\b)authorization\\?["']?\s*[:=,]\s*\\?['"]?(basic|bearer|token)\s+(?P<secret>[A-Za-z0-9+/=._~\-]{16,})"#,
        Check::Entropy(3.0),
    ),
    (
        "secret assignment",
        r#"(?im)[A-Za-z0-9_.\-]*(secret|passw(or)?d|pwd|token|api[_\-]?key|access[_\-]?key|auth[_\-]?key|private[_\-]?key|credentials?)[A-Za-z0-9_.\-]*\\?["']?\s*(:=|=>|=|:)\s*[bru]?\\?(?P<q>["'`]?)(?P<secret>[A-Za-z0-9+/=_\-.~!@#$%^&*]{16,})(\\?["'`\s;,)]|$)"#,
        Check::Entropy(3.5),
    ),
];

/// Values that name a password without being one (a template's, a test's).
const DUMMY_PASSWORDS: &[&str] = &[
    "password",
    "passw0rd",
    "changeme",
    "change_me",
    "changeit",
    "secret",
    "example",
    "test",
    "testing",
    "dummy",
    "sample",
    "placeholder",
    "redacted",
    "hidden",
    "none",
    "null",
    "nil",
    "true",
    "false",
    "empty",
    "required",
    "optional",
    "string",
    "default",
    "xxxxxx",
    "your_password",
    "yourpassword",
    "mypassword",
    "admin",
    "root",
    "guest",
    "user",
    "pass",
    "foo",
    "bar",
    "baz",
    "foobar",
    "opensesame",
];

/// A human password in a `password:`-style field: a config file's (YAML, INI, properties, TOML,
/// JSON, XML, env, Markdown) value, quoted or not, or a quoted string in code. The value must
/// mix two kinds of character (letters, digits, symbols) and not be a placeholder, a variable
/// or a dummy word; in code an unquoted value is an expression, not a password.
fn human_password(text: &str, path: Option<&str>) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(
            r#"(?im)^[ \t\-]*["']?([A-Za-z0-9_.\-]*(password|passwd|passphrase|pwd)|([A-Za-z0-9_.\-]*[_.\-])?pass)["']?\s*[:=]\s*(?P<q>["']?)(?P<secret>[^\s"'#,;<>(){}\[\]]{6,64})["']?\s*[,;]?\s*(#.*)?$"#,
        )
        .expect("valid pattern")
    });
    let config = path.is_none_or(|p| {
        let ext = p.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
        let name = p.rsplit('/').next().unwrap_or(p);
        matches!(
            ext.as_str(),
            "yaml"
                | "yml"
                | "ini"
                | "cfg"
                | "conf"
                | "properties"
                | "toml"
                | "json"
                | "ipynb"
                | "xml"
                | "env"
                | "md"
                | "txt"
                | "rst"
        ) || !name.contains('.')
    });
    re.captures_iter(text).any(|c| {
        let secret = c.name("secret").map_or("", |m| m.as_str());
        let quoted = c.name("q").is_some_and(|m| !m.as_str().is_empty());
        if !(quoted || config) || placeholder(secret) {
            return false;
        }
        let lower = secret.to_ascii_lowercase();
        // A value that names what it stands for (`mysql_passwd`, `hive-pwd`) is a placeholder.
        let names_itself = [
            "pass", "pwd", "secret", "example", "dummy", "sample", "changeme",
        ]
        .iter()
        .any(|w| lower.contains(w));
        if DUMMY_PASSWORDS.contains(&lower.as_str())
            || names_itself
            || lower.starts_with("os.")
            || secret.contains("::")
        {
            return false;
        }
        kinds(secret) >= 2
            && !(secret
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
                && !quoted
                && !secret.bytes().any(|b| b.is_ascii_digit()))
    })
}

/// One compiled regex per rule, in rule order.
fn rules() -> &'static [Regex] {
    static R: OnceLock<Vec<Regex>> = OnceLock::new();
    R.get_or_init(|| {
        RULES
            .iter()
            .map(|r| Regex::new(r.1).expect("valid secret pattern"))
            .collect()
    })
}

/// Shannon entropy of `s`, in bits per character (Gitleaks' measure, one implementation).
pub(crate) fn entropy(s: &str) -> f64 {
    crate::secrets::gitleaks::entropy(s.as_bytes())
}

fn placeholder(s: &str) -> bool {
    let first = s.chars().next().unwrap_or('*');
    if "$<{%*".contains(first) || s.chars().all(|c| c == first) {
        return true;
    }
    // A word that says what goes there, numbered or not (`key_1234`, `password1`, `your-token`).
    let word: String = s
        .chars()
        .filter(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_lowercase();
    let word = word
        .strip_prefix("your")
        .or(word.strip_prefix("my"))
        .unwrap_or(&word);
    if [
        "key", "pass", "password", "passwd", "pwd", "secret", "token", "user", "username", "xxx",
        "changeme", "example", "dummy", "apikey",
    ]
    .contains(&word)
    {
        return true;
    }
    // A value that says what it is (`correct_master_key_123!`, `wJalr…EXAMPLEKEY`,
    // `secure%20password`): documentation and tests, not a live credential.
    let lower = s.to_ascii_lowercase();
    [
        "password",
        "passwd",
        "secret",
        "example",
        "dummy",
        "sample",
        "changeme",
        "placeholder",
        "_key",
        "key_",
    ]
    .iter()
    .any(|w| lower.contains(w))
}

/// Character kinds in `s` (lower, upper, digit, other).
pub(crate) fn kinds(s: &str) -> usize {
    [
        s.bytes().any(|b| b.is_ascii_lowercase()),
        s.bytes().any(|b| b.is_ascii_uppercase()),
        s.bytes().any(|b| b.is_ascii_digit()),
        s.bytes().any(|b| !b.is_ascii_alphanumeric()),
    ]
    .iter()
    .filter(|&&k| k)
    .count()
}

/// A host name reserved for documentation and tests (RFC 2606), where no real credential works.
fn documentation_host(host: &str) -> bool {
    let h = host.to_ascii_lowercase();
    let h = h.trim_end_matches('.');
    ["example.com", "example.org", "example.net"]
        .iter()
        .any(|d| h == *d || h.ends_with(&format!(".{d}")))
        || [".example", ".test", ".invalid"]
            .iter()
            .any(|t| h.ends_with(t))
        || h == "example"
}

/// A loopback host (`localhost`, `127.0.0.1`, `[::1]`): a credential for it is a local
/// development or documentation one unless it looks random.
fn loopback_host(host: &str) -> bool {
    let h = host.to_ascii_lowercase();
    h == "localhost" || h.starts_with("127.") || h == "0.0.0.0" || h.ends_with(".localhost")
}

/// Whether `s` is an identifier or a dotted or `::` path (`MI_UserCredentials_0`,
/// `D3D10_SB_RESOURCE_RETURN_TYPE`): in a program's source an unquoted one is a type or an
/// expression, not a value.
fn identifier(s: &str) -> bool {
    s.split(['.', ':']).filter(|p| !p.is_empty()).all(|p| {
        p.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

fn passes(check: Check, c: &regex::Captures, code: bool) -> bool {
    let secret = c.name("secret").map(|m| m.as_str());
    match (check, secret) {
        (Check::None, _) => true,
        (_, None) => false,
        (Check::UrlCredential, Some(s)) => {
            let host = c.name("host").map_or("", |h| h.as_str());
            // `foo:bar`, `Aladdin:opensesame`: a short password of one kind of character is an
            // example, as are the dummy words.
            let lower = s.to_ascii_lowercase();
            !placeholder(s)
                && (kinds(s) >= 2 || s.len() >= 12)
                && (s.len() >= 6
                    || (s.bytes().any(|b| b.is_ascii_digit())
                        && s.bytes().any(|b| b.is_ascii_alphabetic())))
                && !DUMMY_PASSWORDS.contains(&lower.as_str())
                && !["pass", "pwd"].iter().any(|w| lower.starts_with(w))
                && !documentation_host(host)
                && !(loopback_host(host)
                    && (entropy(s) < 3.0 || !s.bytes().any(|b| b.is_ascii_digit())))
        }
        (Check::Entropy(min), Some(s)) => {
            let s = s.trim_end_matches(['.', '=']);
            let unquoted = c.name("q").is_some_and(|q| q.as_str().is_empty());
            // In code, an unquoted identifier is a type or an expression.
            let expression = code && unquoted && identifier(s);
            !expression
                && !placeholder(s)
                && s.bytes().any(|b| b.is_ascii_digit())
                && s.bytes().any(|b| b.is_ascii_alphabetic())
                && entropy(s) >= min
        }
    }
}

/// Why a file is sensitive, if it is, judged by its content: the kind of the first rule (in
/// rule order) that finds a secret. Each rule is its own regex, so the regex engine can skip
/// ahead to the rule's literal part (`AKIA`, `hooks.slack.com`, `://`) instead of running one
/// automaton of every rule over every byte: measured on the 16,250 files of the bench corpus,
/// one `RegexSet` pass fell back to the slow NFA simulation and took 4× as long.
pub fn sensitive_content(text: &str) -> Option<&'static str> {
    sensitive_content_at(text, None)
}

/// [`sensitive_content`] for the text of the file at `path`: ri-batch's rules first, then a
/// human password in a password field, then Gitleaks' rule set ([`crate::secrets::gitleaks`]),
/// whose rules for some kinds of file only apply when the path is known.
pub fn sensitive_content_at(text: &str, path: Option<&str>) -> Option<&'static str> {
    own_rules_at(text, path)
        .or_else(|| human_password(text, path).then_some("password field"))
        .or_else(|| crate::secrets::credentials::find(text, path))
        .or_else(|| crate::secrets::gitleaks::find(text, path))
}

/// The kind of the first of ri-batch's own content rules that finds a secret in `text` (the rule
/// set before Gitleaks' was added; for measuring what that set adds).
pub fn own_rules(text: &str) -> Option<&'static str> {
    own_rules_at(text, None)
}

/// [`own_rules`] for the text of the file at `path`: in a program's source an unquoted
/// identifier assigned to a secret-like name is a type or an expression.
pub fn own_rules_at(text: &str, path: Option<&str>) -> Option<&'static str> {
    let code = crate::secrets::gitleaks::is_code(path);
    RULES
        .iter()
        .zip(rules())
        .find_map(|(&(kind, _, check), re)| {
            let found = match check {
                Check::None => re.is_match(text),
                _ => re.captures_iter(text).any(|c| passes(check, &c, code)),
            };
            found.then_some(kind)
        })
}

/// The number of content rules (kinds of secret recognised by content).
pub fn content_rule_count() -> usize {
    RULES.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        for p in [
            ".env",
            "app/.env.local",
            "certs/server.pem",
            "id_rsa",
            "home/.ssh/config",
            "x/.npmrc",
            "deploy/credentials.json",
        ] {
            assert!(sensitive_path(p).is_some(), "{p}");
        }
        for p in [
            "README.md",
            "src/env.rs",
            "lib/envelope.js",
            "keys.md",
            "docs/environment.md",
        ] {
            assert!(sensitive_path(p).is_none(), "{p}");
        }
    }

    #[test]
    fn contents() {
        let key = "x\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----\n";
        assert_eq!(sensitive_content(key), Some("private key block"));
        let rsa = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF0qJ7w3cYqGkh8v0pM2+Ab2zZ9yk\n";
        assert_eq!(sensitive_content(rsa), Some("private key block"));
        // dotenv's README documents multiline values with a placeholder key: not a secret.
        let doc = "PRIVATE_KEY=\"-----BEGIN RSA PRIVATE KEY-----\nKh9NV...\n-----END RSA PRIVATE KEY-----\"";
        assert_eq!(sensitive_content(doc), None);
        assert_eq!(
            sensitive_content("id = AKIAQWERTYUIOPASDFGH;"),
            Some("aws access key id")
        );
        assert!(sensitive_content("token: ghp_0123456789abcdefghijABCDEFGHIJ012345").is_some());
        assert!(sensitive_content("const k = 'sk_live_4eC39HqLyjWDarjtT1zdp7dc'").is_some());
        assert!(
            sensitive_content("BEGIN PUBLIC KEY and AKIA lowercase akiaqwertyuiopasdfgh").is_none()
        );
        assert!(sensitive_content("fn main() { println!(\"hello\"); }").is_none());
    }

    #[test]
    fn the_three_kinds_that_once_got_through() {
        assert_eq!(
            sensitive_content("clone https://deploy:Zq7pW3xR9tLm@git.corp-internal.io/x.git"),
            Some("credentials in url")
        );
        assert_eq!(
            sensitive_content("SECRET = \"q8V2mZ7xL0pR4tY9wK3nB6cJ1hF5dG2sA8eU7iO0\"\n"),
            Some("secret assignment")
        );
        assert_eq!(
            sensitive_content(
                "curl -X POST https://hooks.slack.com/services/T0000AAAA/B0000BBBB/abcdEFGHijklMNOPqrstUVWX"
            ),
            Some("slack webhook")
        );
    }

    #[test]
    fn placeholders_and_code_are_not_secrets() {
        for text in [
            "url = \"postgres://user:${DB_PASSWORD}@localhost/db\"",
            "see https://user:<password>@host/",
            "password = \"********************\"",
            "let token = tokenizer.encode_batch(inputs)?;",
            "api_key = \"your-api-key-goes-here\"",
            "secret: String,",
            "fn password_hash(password: &str) -> String {",
            "max_tokens = 500",
            "let password_hash = argon2.hash_password(input)?;",
            "https://docs.rs/regex/1.10.0/regex/",
            "let url = Url::parse(\"https://user:password@example.com/\")?;",
        ] {
            assert_eq!(sensitive_content(text), None, "{text}");
        }
    }

    #[test]
    fn a_url_password_needs_no_user_and_may_hold_an_at_sign() {
        for text in [
            "REDIS = \"redis://:Xk9pQ2rT7vLm4@cache.corp-internal.io:6379/0\"",
            "DSN = \"postgres://app:Pa@ss9w0rd!x7@db.corp-internal.io/app\"",
        ] {
            assert_eq!(
                sensitive_content(text),
                Some("credentials in url"),
                "{text}"
            );
        }
        // dotenv's documented format, with a key that names itself.
        let doc = "DOTENV_KEY=\"dotenv://:key_1234@dotenvx.com/vault/.env.vault?environment=prod\"";
        assert_eq!(sensitive_content(doc), None);
    }

    #[test]
    fn types_and_local_examples_are_not_secrets() {
        for (text, path) in [
            ("pub credentials: MI_UserCredentials_0,", "src/lib.rs"),
            (
                "    ResourceReturnTypeToken: D3D10_SB_RESOURCE_RETURN_TYPE,",
                "src/um/d3d10.rs",
            ),
            (
                "//! let u = \"https://Aladdin:opensesame@localhost:8887\";",
                "src/lib.rs",
            ),
            (
                "let base: Url = \"moz://foo:bar@servo/baz\".parse().unwrap();",
                "tests/unit.rs",
            ),
            (
                "let correct_password = b\"correct_master_key_123!\";",
                "src/aes.rs",
            ),
        ] {
            assert_eq!(sensitive_content_at(text, Some(path)), None, "{text}");
        }
        // The same value quoted, or in a config file, is one.
        assert!(sensitive_content_at("token: \"MI_UserCredentials_0xQ7\"", Some("a.rs")).is_some());
        assert!(sensitive_content_at("SMTP_PASS=Qv7mZ2xL", Some("app.ini")).is_some());
        assert!(
            sensitive_content_at("db = \"postgres://app:Xk9pQ2rT7v@localhost/app\"", None)
                .is_some()
        );
    }

    #[test]
    fn entropy_is_in_bits_per_character() {
        assert_eq!(entropy("aaaa"), 0.0);
        assert!((entropy("abcd") - 2.0).abs() < 1e-12);
        assert!(content_rule_count() >= 25);
    }
}
