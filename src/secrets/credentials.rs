//! Credentials found by where they stand rather than by a provider's format: a value given to a
//! secret-named command-line flag or to a tool's password flag, piped into a login, in an
//! authorization or key header, in a URL query parameter, passed as a random string to a client
//! call, in a `name=value` password pair, a netrc entry or a password column of a table; and
//! token shapes no prefix rule of the other layers knows. Each finding's value must look like a
//! credential (not a placeholder, a variable, a dummy word or an identifier), so documentation
//! that names a flag or a header is not a finding.

use crate::secrets::sensitive::{entropy, kinds};
use regex::Regex;
use std::sync::OnceLock;

/// What the value of a finding must look like.
#[derive(Clone, Copy)]
enum Value {
    /// A human password: 6+ characters of two kinds (lower, upper, digit, symbol), not a
    /// placeholder, dummy word or expression.
    Password,
    /// A token: 16+ characters holding letters and digits, with this many bits of entropy per
    /// character.
    Random(f64),
    /// The pattern's shape is enough.
    Shape,
}

/// Rules found by one pattern each: kind, pattern (its value in the `secret` group), check.
const RULES: &[(&str, &str, Value)] = &[
    // `--db-password=…`, `--api-key …`, `-token …`.
    (
        "credentials on a command line",
        r#"(?i)(?:^|[\s"'`])--?(?:[a-z0-9]+[-_])*(?:password|passwd|pass|pwd|passphrase|token|api-?key|apikey|secret|secret-key|access-key|auth-token|client-secret|private-token)(?:=|[ \t]+)["']?(?P<secret>[^\s'"`]{6,200})"#,
        Value::Password,
    ),
    // A password given to a tool's short flag: `sshpass -p …`, `mysql -p…`, `redis-cli -a …`,
    // `docker login -p …`, `nuget push -k …`.
    (
        "credentials on a command line",
        r#"(?i)(?-u:\b)(?:sshpass|mysql|mysqldump|mysqladmin|mysqlimport|mysqlsh|mariadb|mariadb-dump|pg_dump)(?-u:\b)[^\n|;&]*?[ \t]-p[ \t]*["']?(?P<secret>[^\s'"`]{4,128})"#,
        Value::Password,
    ),
    (
        "credentials on a command line",
        r#"(?i)(?-u:\b)(?:redis-cli(?-u:\b)[^\n|;&]*?[ \t]-a|docker[ \t]+login(?-u:\b)[^\n|;&]*?[ \t]-p|(?:nuget|dotnet[ \t]+nuget)[ \t]+push(?-u:\b)[^\n|;&]*?[ \t](?:-k|-apikey)|htpasswd[ \t]+-\w*b\w*[ \t]+\S+[ \t]+\S+)[ \t]+["']?(?P<secret>[^\s'"`]{4,128})"#,
        Value::Password,
    ),
    // `echo "…" | az devops login`, `… | docker login --password-stdin`.
    (
        "credentials piped to a login",
        r#"(?i)(?-u:\b)(?:echo|printf)[ \t]+(?:-n[ \t]+)?["']?(?P<secret>[^\s'"`|]{8,200})["']?[ \t]*\|[^\n]*(?:login|-stdin|passwd|auth)"#,
        Value::Password,
    ),
    // `Authorization: SSWS …`, any scheme or none, quoted, in JSON or a header map.
    (
        "credentials in a header",
        r#"(?i)(?-u:\b)(?:proxy-)?authorization\\?["']?\s*[:=,]\s*\\?["']?(?:[A-Za-z][A-Za-z0-9_\-]{1,24}[ \t]+)?(?P<secret>[A-Za-z0-9+/=._~\-]{16,})"#,
        Value::Random(3.0),
    ),
    (
        "credentials in a header",
        r#"(?i)(?-u:\b)x-[a-z0-9\-]*(?:api-?key|token|secret|auth|key|signature|session|password)[a-z0-9\-]*\\?["']?\s*[:=,]\s*\\?["']?(?P<secret>[A-Za-z0-9+/=._~\-]{16,})"#,
        Value::Random(3.0),
    ),
    // `?sv=…&sig=…`, `?access_token=…`, `&api_key=…`.
    (
        "credentials in a url query",
        r#"(?i)[?&;](?:sig|signature|x-amz-signature|x-goog-signature|x-amz-security-token|token|access_token|refresh_token|id_token|auth|auth_token|authtoken|api[_-]?key|apikey|key|secret|client_secret|pat|private_token|sas|code)=(?P<secret>[A-Za-z0-9%+/._~\-]{16,})"#,
        Value::Random(3.0),
    ),
    // `jdbc:mysql://db/app?user=app&password=…`: a human password, short or not.
    (
        "credentials in a url query",
        r#"(?i)[?&](?:password|passwd|pwd|pass)=(?P<secret>[^\s&#'"<>]{6,64})"#,
        Value::Password,
    ),
    // .NET and Java XML settings: `<add key="DbPassword" value="…"/>`.
    (
        "password in a settings key",
        r#"(?i)(?:key|name)\s*=\s*["'][A-Za-z0-9_.:\-]*(?:password|passwd|pwd|secret|token|api[_-]?key)[A-Za-z0-9_.:\-]*["']\s+value\s*=\s*["'](?P<secret>[^"'<>\s]{6,200})["']"#,
        Value::Password,
    ),
    // An npm registry's `_auth` / `_authToken` in a file of any name.
    (
        "registry auth token",
        r"(?m)(?:^|:)_auth(?:Token)?\s*=\s*(?P<secret>[^\s$]{16,})",
        Value::Random(3.0),
    ),
    // Password hashes (bcrypt, sha-crypt, Apache's apr1): an htpasswd or shadow line of any name.
    (
        "password hash",
        r"(?P<secret>\$(?:2[aby]\$[0-9]{2}\$[./A-Za-z0-9]{53}|(?:1|5|6|apr1)\$[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{22,86}))",
        Value::Shape,
    ),
    (
        "openvpn static key",
        r"-----BEGIN OpenVPN Static key V1-----\s+[0-9a-f]{32}",
        Value::Shape,
    ),
    // Token shapes without a rule elsewhere.
    (
        "docker hub token",
        r"(?-u:\b)dckr_(?:pat|oat)_[A-Za-z0-9_\-]{27,}",
        Value::Shape,
    ),
    (
        "nuget api key",
        r"(?-u:\b)oy2[a-z0-9]{43}(?-u:\b)",
        Value::Shape,
    ),
    (
        "discord bot token",
        r"(?-u:\b)(?P<secret>[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40})(?-u:\b)",
        Value::Random(3.5),
    ),
    (
        "azure devops token",
        r"(?-u:\b)(?P<secret>[a-z2-7]{52}|[A-Za-z0-9]{76}AZDO[A-Za-z0-9]{4})(?-u:\b)",
        Value::Random(3.5),
    ),
    // A provider-style prefix, then a long random body: `pat_…`, `key-…`, `tok_…`.
    (
        "prefixed token",
        r"(?i)(?-u:\b)(?:sk|pk|rk|ak|key|tok|token|api|pat|secret|sess|auth|bot)[_\-](?P<secret>[A-Za-z0-9]{28,})(?-u:\b)",
        Value::Random(4.2),
    ),
    // A random string literal as a client call's argument: `client.run("…")`,
    // `cohere.Client("…")`, `Github("…")`.
    (
        "token passed to a client",
        r#"(?i)(?-u:\b)[A-Za-z0-9_]*(?:client|bot|login|auth|connect|token|secret|session|credential|api_?key|github|gitlab|slack)[A-Za-z0-9_]*[ \t]*\([ \t]*(?:[A-Za-z_]+[ \t]*=[ \t]*)?["'](?P<secret>[A-Za-z0-9_\-.+/=]{24,})["']"#,
        Value::Random(4.0),
    ),
    // `ansible_ssh_pass=…`, `Password=…;` in a connection string, mid-line.
    (
        "password in a key=value pair",
        r#"(?i)(?:^|[\s;,?&(>$.])(?:[A-Za-z0-9_.\-]*(?:password|passwd|passphrase|pwd)|(?:[A-Za-z0-9_.\-]*[_.\-])?pass)[ \t]*=[ \t]*["']?(?P<secret>[^\s;,'"`(){}\[\]<>$%]{6,64})"#,
        Value::Password,
    ),
    // A netrc entry, in a file of any name.
    (
        "netrc entry",
        r"(?m)(?:^|\s)(?:machine\s+\S+|default)\s+(?:login\s+\S+\s+)?(?:account\s+\S+\s+)?password\s+(?P<secret>\S{4,128})",
        Value::Password,
    ),
];

/// Values that name a password without being one (a template's, a test's).
const DUMMIES: &[&str] = &[
    "password",
    "passw0rd",
    "password1",
    "password123",
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
    "true",
    "false",
    "required",
    "optional",
    "string",
    "default",
    "admin",
    "root",
    "guest",
    "opensesame",
    "hunter2",
    "foobar",
    "letmein",
];

fn rules() -> &'static [Regex] {
    static R: OnceLock<Vec<Regex>> = OnceLock::new();
    R.get_or_init(|| {
        RULES
            .iter()
            .map(|r| Regex::new(r.1).expect("valid credential pattern"))
            .collect()
    })
}

/// A value that stands for a credential rather than being one: a variable (`$TOKEN`,
/// `${{ secrets.X }}`, `%PASS%`), a placeholder (`<password>`, `{token}`, `****`, `xxxx`), a
/// dummy word, a word that names itself (`your_password`, `mysql_pwd`), or an expression
/// (`os.environ[…]`, `getpass()`, `a::b`).
fn stands_for_one(v: &str) -> bool {
    let first = v.chars().next().unwrap_or('*');
    let lower = v.to_ascii_lowercase();
    let letters: String = lower.chars().filter(char::is_ascii_alphabetic).collect();
    "$<{%*[(@\\".contains(first)
        || v.chars().all(|c| c == first)
        || v.contains("::")
        || v.contains("${")
        || v.contains("{{")
        || letters.contains("xxx")
        || DUMMIES.contains(&lower.as_str())
        || DUMMIES.contains(&letters.as_str())
        || [
            "pass",
            "pwd",
            "secret",
            "token",
            "apikey",
            "example",
            "dummy",
            "sample",
            "changeme",
            "placeholder",
            "your",
            "getenv",
            "environ",
            "process",
            "config",
            "settings",
        ]
        .iter()
        .any(|w| letters.contains(w))
        || [
            "os.", "env.", "self.", "this.", "args.", "opts.", "options.",
        ]
        .iter()
        .any(|p| lower.starts_with(p))
        || placeholder_word(v)
}

/// A value with no digit that holds a word in capitals (`fifo:PATH`, `Bearer-TOKEN`): the
/// convention for what goes there.
fn placeholder_word(v: &str) -> bool {
    !v.bytes().any(|b| b.is_ascii_digit())
        && v.split(|c: char| !c.is_ascii_alphabetic())
            .any(|w| w.len() >= 3 && w.bytes().all(|b| b.is_ascii_uppercase()))
}

/// Whether `v` is an identifier or a dotted name (`MI_UserCredentials_0`, `args.token`,
/// `D3D10_SB_TYPE`): an expression or a type in code, not a value.
fn identifier(v: &str) -> bool {
    v.split('.').all(|p| {
        p.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    }) && v.contains(['_', '.'])
}

/// Whether `v` looks like a credential of the kind `check` wants.
fn credible(v: &str, check: Value) -> bool {
    let v = v.trim_end_matches(['.', ',', ';', ')', ']', '}', '\\']);
    match check {
        Value::Shape => true,
        Value::Password => {
            v.len() >= 6
                && kinds(v) >= 2
                && !stands_for_one(v)
                && !identifier(v)
                && !v.starts_with('-')
                && !v.contains("://")
                && !v.contains('/')
        }
        Value::Random(bits) => {
            let core = v.trim_end_matches('=');
            core.len() >= 16
                && core.bytes().any(|b| b.is_ascii_digit())
                && core.bytes().any(|b| b.is_ascii_alphabetic())
                && !stands_for_one(core)
                && entropy(core) >= bits
        }
    }
}

/// The cells of a table row split at `sep`, trimmed of spaces and quotes.
fn cells(line: &str, sep: char) -> Vec<String> {
    let line = line.trim().trim_matches('|');
    line.split(sep)
        .map(|c| c.trim().trim_matches(['"', '\'']).to_string())
        .collect()
}

/// A password column: a table (CSV, TSV, `;`- or `|`-separated) whose header names a column
/// `password` (or `passwd`, `pwd`, `pass`, `secret`, `token`, `api_key`) and one of whose rows
/// holds a value there that is not a placeholder.
fn password_column(text: &str) -> bool {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty()).take(200);
    let Some(header) = lines.next() else {
        return false;
    };
    let Some(sep) = [',', '\t', ';', '|']
        .into_iter()
        .find(|&s| header.matches(s).count() >= 1)
    else {
        return false;
    };
    let head = cells(header, sep);
    let named = |c: &str| {
        let c = c.to_ascii_lowercase().replace([' ', '-'], "_");
        c.contains("password")
            || c.contains("passwd")
            || [
                "pwd",
                "pass",
                "secret",
                "token",
                "api_key",
                "apikey",
                "passphrase",
            ]
            .contains(&c.as_str())
    };
    let Some(col) = head.iter().position(|c| named(c)) else {
        return false;
    };
    if head.len() < 2 || head.iter().any(|c| c.len() > 40 || c.contains(' ')) {
        return false;
    }
    lines.any(|l| {
        let row = cells(l, sep);
        row.len() == head.len()
            && row[col].len() >= 4
            && !row[col].starts_with('-')
            && !stands_for_one(&row[col])
            && !["n/a", "na", "none", "null", "-", "yes", "no"]
                .contains(&row[col].to_ascii_lowercase().as_str())
    })
}

/// Whether `path` is a shell script (`.sh`, `.bash`, `.zsh`).
fn shell(path: Option<&str>) -> bool {
    path.and_then(|p| p.rsplit_once('.'))
        .is_some_and(|(_, e)| matches!(e.to_ascii_lowercase().as_str(), "sh" | "bash" | "zsh"))
}

/// Whether byte `at` of `text` is inside a string literal of its line: an odd number of
/// quotes of one kind before it (`var cs = "Server=…;Password=…"`).
fn in_string(text: &str, at: usize) -> bool {
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let before = &text[start..at];
    before.matches('"').count() % 2 == 1 || before.matches('\'').count() % 2 == 1
}

/// The kind of the first credential found in `text` (of the file at `path`, when known).
pub fn find(text: &str, path: Option<&str>) -> Option<&'static str> {
    // A shell script's unquoted value is a literal (`export DB_PASSWORD=…`), not an
    // expression: for these rules it is not code.
    let code = crate::secrets::gitleaks::is_code(path) && !shell(path);
    for (&(kind, _, check), re) in RULES.iter().zip(rules()) {
        // In a program's source, a password pair's unquoted value is an expression.
        let quoted_only = code && kind == "password in a key=value pair";
        let found = re.captures_iter(text).any(|c| {
            let whole = c.get(0).expect("a match");
            let m = whole.as_str();
            if quoted_only && !m.contains(['"', '\'']) && !in_string(text, whole.start()) {
                return false;
            }
            let v = c.name("secret").map_or(m, |s| s.as_str());
            credible(v, check)
        });
        if found {
            return Some(kind);
        }
    }
    (!code && password_column(text)).then_some("password column")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_by_where_they_stand() {
        for (text, kind) in [
            ("sshpass -p 'Vq8!mZ2rLx' ssh deploy@host", "credentials on a command line"),
            ("mysqldump -u root -pK7v#Qm2Lz9 shop > dump.sql", "credentials on a command line"),
            ("nuget push pkg.nupkg -k Xm9Qp2Lr7Vt4Wz8N --source feed", "credentials on a command line"),
            ("deploy --db-password=Hx7pQ2mZ9w app", "credentials on a command line"),
            ("echo \"k3p9x2vq7m4r8t1w6z5y0b3n2c7d4f9g8h1j6\" | az devops login --org x", "credentials piped to a login"),
            ("curl -H \"Authorization: SSWS 00Qx7Lm2Vp9Rt4Wz8Nc3Bd6Hf1Jg5Kh0Yq7Ms2\" https://x.okta.com", "credentials in a header"),
            ("https://acct.blob.core.windows.net/c/b.zip?sv=2022-11-02&sig=Q7xL2mV9pR4tW8zN3cB6dH1fJ5gK0yM%3D", "credentials in a url query"),
            ("export T=dckr_pat_Qx7Lm2Vp9Rt4Wz8Nc3Bd6Hf1Jg5", "docker hub token"),
            ("client.run('MTE2NzQ1ODk2NzQ1ODk2NzQ1.GhXq7L.Vp9Rt4Wz8Nc3Bd6Hf1Jg5Kh0Yq7Ms2Xz')", "discord bot token"),
            ("co = cohere.Client(\"Qx7Lm2Vp9Rt4Wz8Nc3Bd6Hf1Jg5Kh0Yq7Ms2Xz\")", "token passed to a client"),
            ("web1 ansible_host=10.0.0.5 ansible_ssh_pass=Tr0ub4dor3x", "password in a key=value pair"),
            ("Server=db;User Id=sa;Password=Qz7!vLp2x;", "password in a key=value pair"),
            ("machine ftp.corp.io login deploy password Zk8vQ2mx", "netrc entry"),
            ("url = jdbc:mysql://db.corp/app?user=app&password=Xk9pQ2rT", "credentials in a url query"),
            ("<add key=\"DbPassword\" value=\"Qv7#mZ2xLp\" />", "password in a settings key"),
            ("//npm.corp.io/:_authToken=Zk8vQ2mxLp4Rt7Wn3Bc6", "registry auth token"),
            ("admin:$apr1$q8Zv2xLp$Zk8vQ2mxLp4Rt7Wn3Bc6Hd", "password hash"),
            ("$mail->Password = 'Hx7pQ2mZ9w';", "password in a key=value pair"),
        ] {
            assert_eq!(find(text, Some("notes.txt")), Some(kind), "{text}");
        }
        assert_eq!(
            find(
                "user,email,password\nann,a@x.io,Summer2024!\n",
                Some("users.csv")
            ),
            Some("password column")
        );
    }

    #[test]
    fn names_placeholders_and_code_are_not_credentials() {
        for text in [
            "docker login -u user --password-stdin",
            "mytool --password $PASSWORD --token ${{ secrets.TOKEN }}",
            "  --api-key <API_KEY>   the key to use",
            "Authorization: Bearer <token>",
            "https://api.x.io/v1?key=YOUR_API_KEY",
            "pub credentials: MI_UserCredentials_0,",
            "password = getpass.getpass()",
            "mysql -u root -p shop",
            "machine example.com login user password placeholder",
            "let digest = sha256(\"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\");",
            "\"--jobserver-auth=auth-a --jobserver-fds=fds-a\",",
            "/// `--jobserver-auth=fifo:PATH`",
            "base64::decode_config(\"aGVsbG8gaW50ZXJuZXR-Cg==\", base64::URL_SAFE)",
            "user,email,password\nann,a@x.io,\nbob,b@x.io,N/A\n",
        ] {
            assert_eq!(find(text, Some("x.txt")), None, "{text}");
        }
        assert_eq!(find("db_pass = compute_pass(user)\n", Some("x.py")), None);
        // In a shell script an unquoted value is a literal.
        assert_eq!(
            find(
                "export PGPASSWORD=Xk9pQ2rT\npsql -h db\n",
                Some("deploy.sh")
            ),
            Some("password in a key=value pair")
        );
        assert_eq!(
            find(
                "var cs = \"Server=db;Password=Yq4!zL8vXm;\";",
                Some("conn.cs")
            ),
            Some("password in a key=value pair")
        );
    }
}
