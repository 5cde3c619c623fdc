//! The sensitivity filter end to end: a planted corpus of more than 25 kinds of secret, in code,
//! config and Markdown files, committed to git and in a plain directory, run through every stage.
//! Every Parquet and Arrow column of every output file is decoded, every other output file read
//! as bytes, and no secret, no part of one, and no other byte of a file that held one is found.

mod common;

use common::{commit_files, pipeline, ri_batch};

/// A small deterministic generator (xorshift), so the planted values are the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn of(&mut self, n: usize, alphabet: &str) -> String {
        let a: Vec<char> = alphabet.chars().collect();
        (0..n)
            .map(|_| a[(self.next() % a.len() as u64) as usize])
            .collect()
    }
}

const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const UPNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const HEX: &str = "0123456789abcdef";
const LOWNUM: &str = "abcdefghijklmnopqrstuvwxyz0123456789";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// One planted secret: its kind, the secret itself, and the line that carries it.
struct Planted {
    kind: &'static str,
    secret: String,
    line: String,
}

fn planted() -> Vec<Planted> {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::new();
    let mut add =
        |kind: &'static str, secret: String, line: String| out.push(Planted { kind, secret, line });
    let body = format!("{}\n{}\n{}", r.of(64, B64), r.of(64, B64), r.of(40, B64));
    add(
        "private key block",
        body.clone(),
        format!("-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"),
    );
    let s = r.of(60, B64);
    add(
        "putty private key",
        s.clone(),
        format!("PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nPublic-Lines: 1\n{s}\nPrivate-Lines: 1\n{s}"),
    );
    let s = format!("AGE-SECRET-KEY-1{}", r.of(58, UPNUM));
    add("age secret key", s.clone(), format!("# age key: {s}"));
    let s = format!("AKIA{}", r.of(16, UPNUM));
    add(
        "aws access key id",
        s.clone(),
        format!("aws_access_key_id = {s}"),
    );
    let s = r.of(40, ALNUM);
    add(
        "aws secret access key",
        s.clone(),
        format!("aws_secret_access_key = {s}"),
    );
    let s = format!("ghp_{}", r.of(36, ALNUM));
    add("github token", s.clone(), format!("GH = \"{s}\""));
    let s = format!("github_pat_{}", r.of(82, ALNUM));
    add("github fine-grained token", s.clone(), format!("gh {s}"));
    let s = format!("glpat-{}", r.of(20, ALNUM));
    add("gitlab token", s.clone(), format!("gitlab: {s}"));
    let s = format!(
        "xoxb-{}-{}-{}",
        r.of(12, "0123456789"),
        r.of(12, "0123456789"),
        r.of(24, ALNUM)
    );
    add("slack token", s.clone(), format!("bot {s}"));
    let s = format!(
        "https://hooks.slack.com/services/T{}/B{}/{}",
        r.of(10, UPNUM),
        r.of(10, UPNUM),
        r.of(24, ALNUM)
    );
    add("slack webhook", s.clone(), format!("notify: {s}"));
    let s = format!(
        "https://discord.com/api/webhooks/{}/{}",
        r.of(18, "0123456789"),
        r.of(68, ALNUM)
    );
    add("discord webhook", s.clone(), format!("hook = '{s}'"));
    let s = format!(
        "https://contoso.webhook.office.com/webhookb2/{}@{}/IncomingWebhook/{}/{}",
        r.of(32, HEX),
        r.of(32, HEX),
        r.of(32, HEX),
        r.of(36, HEX)
    );
    add("microsoft teams webhook", s.clone(), format!("teams {s}"));
    let s = format!("sk_live_{}", r.of(24, ALNUM));
    add("stripe key", s.clone(), format!("stripe.api = \"{s}\""));
    let s = format!("AIza{}", r.of(35, ALNUM));
    add("google api key", s.clone(), format!("maps({s})"));
    let s = format!("GOCSPX-{}", r.of(28, ALNUM));
    add(
        "google oauth client secret",
        s.clone(),
        format!("oauth {s}"),
    );
    let s = format!("npm_{}", r.of(36, ALNUM));
    add("npm token", s.clone(), format!("registry {s}"));
    let s = format!("pypi-AgEIcHlwaS5vcmc{}", r.of(70, ALNUM));
    add("pypi token", s.clone(), format!("twine -p {s}"));
    let s = format!("sk-proj-{}", r.of(48, ALNUM));
    add("api secret key", s.clone(), format!("client(key=\"{s}\")"));
    let s = format!("hf_{}", r.of(34, ALNUM));
    add("hugging face token", s.clone(), format!("login {s}"));
    let s = format!("SG.{}.{}", r.of(22, ALNUM), r.of(43, ALNUM));
    add("sendgrid api key", s.clone(), format!("mail {s}"));
    let s = format!("SK{}", r.of(32, HEX));
    add("twilio api key", s.clone(), format!("twilio {s}"));
    let s = format!("key-{}", r.of(32, HEX));
    add("mailgun api key", s.clone(), format!("mailgun {s}"));
    let s = format!("shpat_{}", r.of(32, HEX));
    add("shopify token", s.clone(), format!("shop {s}"));
    let s = format!("sq0atp-{}", r.of(22, ALNUM));
    add("square token", s.clone(), format!("square {s}"));
    let s = format!("dop_v1_{}", r.of(64, HEX));
    add("digitalocean token", s.clone(), format!("doctl {s}"));
    let s = format!("dapi{}", r.of(32, HEX));
    add("databricks token", s.clone(), format!("databricks {s}"));
    let s = format!("PMAK-{}-{}", r.of(24, HEX), r.of(34, HEX));
    add("postman api key", s.clone(), format!("postman {s}"));
    let s = format!("lin_api_{}", r.of(40, ALNUM));
    add("linear api key", s.clone(), format!("linear {s}"));
    let s = format!("NRAK-{}", r.of(27, UPNUM));
    add("new relic key", s.clone(), format!("newrelic {s}"));
    let s = format!("glsa_{}_{}", r.of(32, ALNUM), r.of(8, HEX));
    add("grafana token", s.clone(), format!("grafana {s}"));
    let s = format!("dp.pt.{}", r.of(43, ALNUM));
    add("doppler token", s.clone(), format!("doppler {s}"));
    let s = format!("hvs.{}", r.of(90, ALNUM));
    add("vault token", s.clone(), format!("VAULT {s}"));
    let s = format!("{}.atlasv1.{}", r.of(14, LOWNUM), r.of(64, LOWNUM));
    add("terraform cloud token", s.clone(), format!("tfc {s}"));
    let s = format!("{}:AA{}", r.of(10, "0123456789"), r.of(33, ALNUM));
    add("telegram bot token", s.clone(), format!("bot {s}"));
    let s = format!("{}==", r.of(86, B64));
    add(
        "azure storage key",
        s.clone(),
        format!("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={s};EndpointSuffix=core.windows.net"),
    );
    let s = format!(
        "eyJ{}.eyJ{}.{}",
        r.of(30, ALNUM),
        r.of(40, ALNUM),
        r.of(43, ALNUM)
    );
    add("json web token", s.clone(), format!("jwt {s}"));
    let s = r.of(14, ALNUM);
    add(
        "credentials in url",
        s.clone(),
        format!("remote = https://deploy:{s}@git.corp-internal.io/app.git"),
    );
    let s = r.of(40, ALNUM);
    add(
        "authorization header",
        s.clone(),
        format!("Authorization: Bearer {s}"),
    );
    let s = r.of(40, ALNUM);
    add("secret assignment", s.clone(), format!("SECRET = \"{s}\""));
    out
}

/// The file a planted secret goes into: code, config or Markdown in turn, with ordinary text
/// around it and a marker word that only this file holds.
fn file_for(i: usize, p: &Planted) -> (String, String) {
    let marker = format!("plantedmarker{i:02}");
    match i % 3 {
        0 => (
            format!("src/service_{i:02}.py"),
            format!("\"\"\"Service {i}: connects the billing worker ({marker}).\"\"\"\n\nimport os\n\n{}\n\ndef start():\n    return os.getpid()\n", p.line),
        ),
        1 => (
            format!("config/settings_{i:02}.yaml"),
            format!("# settings for the billing worker, {marker}\nworker:\n  threads: 4\n  notes: |\n    {}\n", p.line.replace('\n', "\n    ")),
        ),
        _ => (
            format!("docs/setup_{i:02}.md"),
            format!("# Setting up the billing worker\n\nThe worker ({marker}) needs this:\n\n```\n{}\n```\n\nThen start it.\n", p.line),
        ),
    }
}

const CLEAN: &[(&str, &str)] = &[
    (
        "README.md",
        "# Billing worker\n\nThe billing worker sends invoices every night and retries failed payments.\n\n## Configuration\n\nSet the number of threads in config/settings.yaml.\n",
    ),
    (
        "src/worker.py",
        "def send_invoices(batch):\n    \"\"\"Send every invoice of the batch and retry failed payments.\"\"\"\n    for invoice in batch:\n        invoice.send()\n",
    ),
];

/// The pieces of a secret worth looking for: the whole, and each alphanumeric run of 8 or more
/// characters (an analyser splits on punctuation), lower-cased like the decoded outputs.
/// Words that are part of a secret's public format, not of the secret (Slack's webhook path):
/// an index's term dictionary, stored as one run of bytes, spells them across clean terms
/// (`service` followed by `settings`).
const FORMAT_WORDS: &[&str] = &["services"];

fn pieces(secret: &str) -> Vec<String> {
    let mut v = vec![secret.to_lowercase()];
    v.extend(
        secret
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|s| s.len() >= 8 && !FORMAT_WORDS.contains(s))
            .map(str::to_lowercase),
    );
    v
}

#[test]
fn no_byte_of_a_planted_secret_reaches_any_output() {
    let t = tempfile::tempdir().unwrap();
    let secrets = planted();
    assert!(secrets.len() >= 25, "{} kinds", secrets.len());
    let mut files: Vec<(String, String)> = secrets
        .iter()
        .enumerate()
        .map(|(i, p)| file_for(i, p))
        .collect();
    files.extend(CLEAN.iter().map(|(p, t)| (p.to_string(), t.to_string())));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    commit_files(&t.path().join("planted-git"), &refs, "planted");
    for (p, text) in &files {
        let f = t.path().join("planted-dir").join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, text).unwrap();
    }
    let mut q = String::new();
    for (i, repo) in ["planted-git", "planted-dir"].iter().enumerate() {
        for (j, topic) in [
            "How do I set up the billing worker?",
            "Which token does the billing worker use to notify the team?",
            "What is the secret key of the billing worker?",
        ]
        .iter()
        .enumerate()
        {
            q.push_str(&format!(
                "{{\"id\":\"q{i}{j}\",\"repo\":\"{repo}\",\"split\":\"dev\",\"answerable\":false,\"question\":\"{topic}\"}}\n"
            ));
        }
    }
    std::fs::write(t.path().join("q.jsonl"), q).unwrap();
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"planted\"\noutput_dir = \"out\"\nquestions = \"q.jsonl\"\n\
         [[repos]]\nname = \"planted-git\"\ngit = \"planted-git\"\n\
         [[repos]]\nname = \"planted-dir\"\ndir = \"planted-dir\"\n\
         [[variants]]\nname = \"rank\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 4000\n\
         [[variants]]\nname = \"compact\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 400\n",
    );
    let out = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every planted file is recorded with the kind of its secret: left out whole, or kept with
    // the lines that hold it redacted.
    let sql = ri_batch(&[
        "sql",
        t.path().join("out").to_str().unwrap(),
        "SELECT repo, path, reason FROM skipped ORDER BY repo, path",
        "--format",
        "csv",
    ]);
    let skipped = String::from_utf8_lossy(&sql.stdout).into_owned();
    let mut whole = vec![false; secrets.len()];
    for repo in ["planted-git", "planted-dir"] {
        for (i, p) in secrets.iter().enumerate() {
            let (path, _) = file_for(i, p);
            let left_out = format!("{repo},{path},sensitive_content: {}\n", p.kind);
            let redacted = format!("{repo},{path},redacted: {} (", p.kind);
            assert!(
                skipped.contains(&left_out) || skipped.contains(&redacted),
                "no row of {repo}/{path} ({}) in\n{skipped}",
                p.kind
            );
            whole[i] |= skipped.contains(&left_out);
        }
    }
    let decoded: Vec<(String, String)> = common::decoded_outputs(&t.path().join("out"))
        .into_iter()
        .map(|(p, text)| (p.display().to_string(), text.to_lowercase()))
        .collect();
    // A redacted file is kept: its other lines (the marker) are searchable.
    let kept = (0..secrets.len()).filter(|&i| !whole[i]).count();
    assert!(
        kept >= secrets.len() / 2,
        "only {kept} of {} redacted",
        secrets.len()
    );
    for i in (0..secrets.len()).filter(|&i| !whole[i]) {
        let marker = format!("plantedmarker{i:02}");
        assert!(
            decoded
                .iter()
                .any(|(n, t)| n.contains("/chunks/") && t.contains(&marker)),
            "{marker} ({}) redacted but not in chunks",
            secrets[i].kind
        );
    }
    // The clean files went through: the filter did not just drop everything.
    let chunks = decoded
        .iter()
        .filter(|(n, _)| n.contains("/chunks/"))
        .map(|(_, t)| t.as_str())
        .collect::<String>();
    assert!(
        chunks.contains("retries failed payments"),
        "clean text indexed"
    );
    assert!(decoded.iter().any(|(n, _)| n.ends_with("report.html")));
    let mut found = Vec::new();
    for (i, p) in secrets.iter().enumerate() {
        let mut needles = pieces(&p.secret);
        if whole[i] {
            needles.push(format!("plantedmarker{i:02}"));
        }
        for (name, text) in &decoded {
            for n in &needles {
                if text.contains(n.as_str()) {
                    found.push(format!("{} ({n}) in {name}", p.kind));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "secret bytes found:\n{}",
        found.join("\n")
    );
}
