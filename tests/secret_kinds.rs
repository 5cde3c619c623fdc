//! Secrets of every common kind, end to end: a sample drawn from each pattern of the maintained
//! rule set (Gitleaks', 200+ kinds) and the kinds no rule of it knows (a URL password with no user
//! or with `@`, escaped quotes in notebook JSON, registry auth in a Kubernetes secret, kubeconfig
//! key data, error-tracker DSNs, tokens in headers and client calls, a human password in a YAML
//! field, a build tool's `<password>`, `curl -u`, an HTTP client's `auth=`), planted in files of
//! a git repository, a plain directory and commit messages, then run through every stage, `ask`
//! and `sql`: no byte of any of them is in any output, and clean files still go through.

mod common;

use common::{commit_files, pipeline, ri_batch};
use regex_syntax::hir::{Class, Hir, HirKind};
use ri_batch::secrets::gitleaks::rule_set;
use ri_batch::secrets::sensitive::sensitive_content_at;

/// A deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A printable byte of `ranges`, letters and digits preferred.
fn pick(ranges: &[(u8, u8)], r: &mut Rng) -> Option<u8> {
    let all: Vec<u8> = ranges
        .iter()
        .flat_map(|&(a, b)| a..=b)
        .filter(|c| (0x21..=0x7e).contains(c))
        .collect();
    let alnum: Vec<u8> = all
        .iter()
        .copied()
        .filter(u8::is_ascii_alphanumeric)
        .collect();
    let from = if alnum.len() >= all.len() / 2 && !alnum.is_empty() {
        alnum
    } else {
        all
    };
    (!from.is_empty()).then(|| from[r.below(from.len())])
}

/// Appends a random string matching `h` to `out`.
fn draw(h: &Hir, r: &mut Rng, out: &mut Vec<u8>) {
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => {}
        HirKind::Literal(l) => out.extend_from_slice(&l.0),
        HirKind::Class(Class::Bytes(c)) => {
            let ranges: Vec<(u8, u8)> = c.ranges().iter().map(|x| (x.start(), x.end())).collect();
            if let Some(b) = pick(&ranges, r) {
                out.push(b);
            }
        }
        HirKind::Class(Class::Unicode(c)) => {
            let ranges: Vec<(u8, u8)> = c
                .ranges()
                .iter()
                .filter(|x| (x.start() as u32) < 0x80)
                .map(|x| (x.start() as u8, (x.end() as u32).min(0x7f) as u8))
                .collect();
            if let Some(b) = pick(&ranges, r) {
                out.push(b);
            }
        }
        HirKind::Repetition(rep) => {
            let max = rep.max.unwrap_or(rep.min + 8).min(rep.min + 8);
            let n = rep.min + r.below((max - rep.min + 1) as usize) as u32;
            for _ in 0..n {
                draw(&rep.sub, r, out);
            }
        }
        HirKind::Capture(c) => draw(&c.sub, r, out),
        HirKind::Concat(v) => v.iter().for_each(|x| draw(x, r, out)),
        HirKind::Alternation(v) => draw(&v[r.below(v.len())], r, out),
    }
}

/// The number of kinds written by hand below (those the rule set lacks).
const HAND_KINDS: usize = 33;

/// One planted secret: where it goes, the text around it, the pieces to look for in outputs.
struct Planted {
    path: String,
    text: String,
    needles: Vec<String>,
}

/// The runs of letters and digits of `s` long and random enough to be looked for in outputs.
fn needles(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|p| p.len() >= 10 && p.bytes().any(|b| b.is_ascii_digit()))
        .map(str::to_lowercase)
        .collect()
}

/// A sample of every rule of the set that its rule finds in a file (a few draws each), and the
/// kinds the set lacks, written for this test (none is a live credential).
fn planted() -> (Vec<Planted>, usize) {
    let mut r = Rng(0x5eed_1234_abcd_ef01);
    let mut out = Vec::new();
    let exts = ["yaml", "txt", "json", "md", "ini", "toml", "py", "conf"];
    let mut kinds = 0;
    for (i, rule) in rule_set().rules.iter().enumerate() {
        if rule.path_only {
            continue;
        }
        let hir = regex_syntax::ParserBuilder::new()
            .unicode(false)
            .utf8(false)
            .build()
            .parse(&rule.pattern)
            .unwrap();
        let mut found = None;
        for attempt in 0..40 {
            let mut bytes = Vec::new();
            draw(&hir, &mut r, &mut bytes);
            let Ok(sample) = String::from_utf8(bytes) else {
                continue;
            };
            let ext = exts[(i + attempt) % exts.len()];
            let path = format!("conf/kind{i:03}.{ext}");
            let text = format!("# settings\n{sample}\n");
            if sensitive_content_at(&text, Some(&path)).is_some() && !needles(&sample).is_empty() {
                found = Some(Planted {
                    path,
                    needles: needles(&sample),
                    text,
                });
                break;
            }
        }
        if let Some(p) = found {
            kinds += 1;
            out.push(p);
        }
    }
    let hand: &[(&str, &str)] = &[
        ("cache.py", "REDIS_URL = \"redis://:Xk9pQ2rT7vLm4@cache.corp-internal.io:6379/0\"\n"),
        ("db.py", "DSN = \"postgres://app:Pa@ss9w0rd!x7@db.corp-internal.io:5432/app\"\n"),
        (
            "notebook.ipynb",
            "{\"cells\": [{\"source\": [\"conn = connect(password=\\\"Zq8mK2pV7xLw4Rt9Yb3n\\\")\\n\"]}]}\n",
        ),
        (
            "k8s/registry.yaml",
            "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: eyJhdXRocyI6eyJyZWdpc3RyeS5jb3JwLmlvIjp7ImF1dGgiOiJaR1Z3Ykc5NU9sUm9NWEJ3TjNnPSJ9fX0K\n",
        ),
        (
            "kube/config",
            "users:\n- name: ci\n  user:\n    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFb3dJQkFBS0NBUUVBMlp4OW5rN3E4\n",
        ),
        (
            "sentry.js",
            "Sentry.init({ dsn: \"https://4f9a1c2e7b3d48e6a0c5f1b2d3e4a5b6@o123456.ingest.sentry.io/7654321\" });\n",
        ),
        (
            "client.sh",
            "curl -H \"X-Api-Key: 7f3kq9Zr2mLp8Wx4Tn6Vb1Hc5\" https://api.vendor-internal.io/v1\n",
        ),
        (
            "headers.py",
            "headers = {\"Authorization\": \"Bearer 9fKq2LmXr7Tz4Wn8Pb3Vc6Hd1\"}\n",
        ),
        ("config/database.yaml", "production:\n  username: app\n  password: Summer2024!\n"),
        (
            "settings.xml",
            "<settings><servers><server><id>corp</id><username>deploy</username><password>Tr0ub4dor&amp;3x</password></server></servers></settings>\n",
        ),
        ("deploy.sh", "curl -u deploy:Xq7vLp9Rt2Wm https://repo.corp-internal.io/upload\n"),
        (
            "fetch.py",
            "r = requests.get(url, auth=(\"svc-reader\", \"Hk8mWq2Lz5Rv\"))\n",
        ),
        // Credentials by where they stand (`src/secrets/credentials.rs`), none of them a provider
        // format that a prefix rule knows.
        ("okta.sh", "curl -s -H 'Authorization: SSWS 00aB3kX9qLm2Vp7Rt4Wz8Nc5Hd1Jf6Gs0Yq2Ue' https://corp.okta-internal.io/api/v1/users\n"),
        ("bot.py", "import discord\nclient = discord.Client()\nclient.run('ODk3NjU0MzIxMDk4NzY1NDMy.Gq2xLm.Zr8Vt3Wp9Nc4Bd7Hf2Jg6Kh1Yq5Ms0XaTe')\n"),
        ("blob.json", "{\"url\": \"https://acct7.blob.core.windows.net/builds/app.zip?sv=2023-01-03&se=2027-01-01&sr=b&sp=r&sig=Zk3%2Bq9LmV2pR7tW4zN8cB5dH1fJ6gK0yMxQ%3D\"}\n"),
        ("ado.sh", "echo h7q3k2m5p9x4v6r2t8w3z7y5b4n6c2d9f3g7j5l4s2a6e8u3o2 | az devops login --organization https://dev.azure-internal.io/corp\n"),
        ("publish.ps1", "dotnet nuget push out/Corp.Lib.1.2.0.nupkg -k oy2kq8m3v5x7p2r9t4w6z8b3n5c7d2f4g6h8j3l5s7a9e2u4 --source https://nuget.corp-internal.io\n"),
        ("ci/docker.env.txt", "DOCKERHUB_TOKEN_VALUE dckr_pat_Wq7xL2mZ9vR4tP8nB3cK6hD1fJ5\n"),
        ("nlp.py", "import cohere\nco = cohere.Client('Vx8Lq2Zm7Rt3Wp9Nc4Bd6Hf1Jg5Kh0Yq3Ms7XaTe')\n"),
        ("mail.ini", "[smtp]\nSMTP_HOST=mail.corp-internal.io\nSMTP_PASS=Rq9!vX2mLp\n"),
        ("inventory", "[web]\nweb1 ansible_host=10.0.4.11 ansible_user=deploy ansible_ssh_pass=Kt7#pW2xQm\n"),
        ("backup.sh", "sshpass -p 'Zm4$qV8xLr' rsync -a /srv deploy@backup.corp-internal.io:/b\nmysqldump -u backup -pHv6!tQ9wZx shop > shop.sql\n"),
        ("deploy/auth.txt", "machine git.corp-internal.io\n  login deploy\n  password Wp3vX8qLm2\n"),
        ("data/users.csv", "id,login,email,password\n1,ann,ann@corp-internal.io,Lk8#vQ2pXz\n2,bob,bob@corp-internal.io,Tz5!mW9qRv\n"),
        ("cli.md", "Run `release-tool --api-key Qp7vL2xZ9mK4tR8w publish`.\n"),
        ("conn.cs", "var cs = \"Server=sql.corp-internal.io;User Id=app;Password=Yq4!zL8vXm;\";\n"),
        ("redis.sh", "redis-cli -h cache.corp-internal.io -a 'Jx5%vM9qLt' ping\n"),
        ("app.properties", "db.url=jdbc:mysql://db.corp-internal.io/app?user=app&password=Wq3#zL8vKm\n"),
        ("Web.config", "<configuration><appSettings><add key=\"SmtpPassword\" value=\"Pz6!kW3qVx\" /></appSettings></configuration>\n"),
        ("ci/npm-auth.txt", "//npm.corp-internal.io/:_authToken=Rk4vW9qLz2Xm7Tn3Bp8Hc5\n"),
        ("auth/users.txt", "deploy:$apr1$Tq7vK2mZ$Lp4Rt7Wn3Bc6Hd1Jg5Kh0Y\n"),
        ("restore.sh", "export PGPASSWORD=Nv8qX3mLz5\npg_restore -h db.corp-internal.io -d app dump\n"),
        ("mailer.php", "<?php\n$mail->Password = 'Gq2!wZ7xKv';\n"),
    ];
    assert_eq!(hand.len(), HAND_KINDS);
    for (path, text) in hand {
        assert!(
            sensitive_content_at(text, Some(path)).is_some(),
            "not found: {path}: {text}"
        );
        kinds += 1;
        let mut n = needles(text);
        n.retain(|x| !["production", "settings"].contains(&x.as_str()));
        out.push(Planted {
            path: format!("hand/{path}"),
            text: text.to_string(),
            needles: n,
        });
    }
    (out, kinds)
}

#[test]
fn no_byte_of_a_secret_of_any_kind_reaches_any_output() {
    let (secrets, kinds) = planted();
    let set = rule_set();
    let drawable = set.rules.iter().filter(|r| !r.path_only).count();
    eprintln!("{kinds} kinds planted, {drawable} drawable rules");
    assert!(kinds >= 100, "{kinds} kinds");
    assert!(
        secrets.len() - HAND_KINDS >= drawable * 9 / 10,
        "only {} of {drawable} rules found their own samples",
        secrets.len() - HAND_KINDS
    );
    let t = tempfile::tempdir().unwrap();
    let clean = [
        ("README.md", "# Billing worker\n\nThe billing worker sends invoices every night and retries failed payments.\n"),
        ("src/worker.py", "def send_invoices(batch):\n    for invoice in batch:\n        invoice.send()\n"),
    ];
    let mut files: Vec<(&str, &str)> = secrets
        .iter()
        .map(|p| (p.path.as_str(), p.text.as_str()))
        .collect();
    files.extend(clean);
    let git = t.path().join("planted-git");
    commit_files(&git, &files, "planted");
    // Commit messages carrying secrets are redacted like files, or left out of `commits`.
    let planted_messages = secrets.iter().step_by(20).count();
    for p in secrets.iter().step_by(20) {
        commit_files(
            &git,
            &[("notes.md", &p.path)],
            &format!("rotate\n\n{}", p.text),
        );
    }
    for (p, text) in &files {
        let f = t.path().join("planted-dir").join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, text).unwrap();
    }
    let q = "{\"id\":\"q1\",\"repo\":\"planted-git\",\"split\":\"dev\",\"answerable\":false,\"question\":\"Which api key token password does the deploy use?\"}\n{\"id\":\"q2\",\"repo\":\"planted-dir\",\"split\":\"dev\",\"answerable\":false,\"question\":\"What is the secret key of the billing worker?\"}\n";
    std::fs::write(t.path().join("q.jsonl"), q).unwrap();
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"kinds\"\noutput_dir = \"out\"\nquestions = \"q.jsonl\"\n\
         [[repos]]\nname = \"planted-git\"\ngit = \"planted-git\"\n\
         [[repos]]\nname = \"planted-dir\"\ndir = \"planted-dir\"\n\
         [[variants]]\nname = \"rank\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 4000\n",
    );
    let run = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let out = t.path().join("out");
    let skipped = ri_batch(&[
        "sql",
        out.to_str().unwrap(),
        "SELECT count(*) AS n FROM skipped WHERE reason LIKE 'sensitive_content%' OR reason LIKE 'redacted%'",
        "--format",
        "csv",
    ]);
    let n: usize = String::from_utf8_lossy(&skipped.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        n,
        secrets.len() * 2,
        "every planted file, in git and in the directory, left out or redacted"
    );
    let kept = ri_batch(&[
        "sql",
        out.to_str().unwrap(),
        "SELECT count(*) AS n FROM commits WHERE subject = 'rotate'",
        "--format",
        "csv",
    ]);
    let kept: usize = String::from_utf8_lossy(&kept.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("scan/manifest.json")).unwrap())
            .unwrap();
    let stat = |k: &str| manifest["stats"][k].as_u64().unwrap() as usize;
    assert_eq!(
        (kept, stat("commits_left_out_sensitive")),
        (
            stat("commits_redacted"),
            planted_messages - stat("commits_redacted")
        ),
        "every planted commit message is kept redacted or left out, and counted"
    );
    assert!(
        2 * kept >= planted_messages,
        "at least half the planted commit messages are kept, redacted ({kept} of {planted_messages})"
    );
    let mut texts: Vec<(String, String)> = common::decoded_outputs(&out)
        .into_iter()
        .map(|(p, t)| (p.display().to_string(), t.to_lowercase()))
        .collect();
    for (repo, question) in [
        (
            "planted-git",
            "Which api key token password does the deploy use?",
        ),
        ("planted-dir", "What is the secret key?"),
    ] {
        let a = ri_batch(&[
            "ask",
            out.to_str().unwrap(),
            question,
            "--repo",
            repo,
            "--json",
        ]);
        texts.push((
            format!("ask {repo}"),
            String::from_utf8_lossy(&a.stdout).to_lowercase(),
        ));
    }
    assert!(
        texts
            .iter()
            .any(|(n, t)| n.contains("/chunks/") && t.contains("retries failed payments")),
        "clean text went through"
    );
    let mut leaks = Vec::new();
    for p in &secrets {
        for (name, text) in &texts {
            for n in &p.needles {
                if text.contains(n.as_str()) {
                    leaks.push(format!("{} ({n}) in {name}", p.path));
                }
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "secret bytes found:\n{}",
        leaks.join("\n")
    );
}
