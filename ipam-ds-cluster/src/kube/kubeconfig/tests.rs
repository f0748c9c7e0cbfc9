//! Kubeconfigs as kubectl and kubeadm write them, and each way one can be
//! unusable, named with the file and the entry.

use std::path::Path;

use super::*;

const TESTDATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/kube/testdata");

fn testdata(name: &str) -> PathBuf {
    Path::new(TESTDATA).join(name)
}

fn base64_of(path: &Path) -> String {
    base64::engine::general_purpose::STANDARD.encode(std::fs::read(path).unwrap())
}

/// Writes `yaml` as a kubeconfig in a fresh directory; the file's path.
fn kubeconfig(dir: &tempfile::TempDir, yaml: &str) -> PathBuf {
    let path = dir.path().join("node.kubeconfig");
    std::fs::write(&path, yaml).unwrap();
    path
}

fn with(cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
current-context: ipam
contexts:
- name: other
  context: {{cluster: nowhere, user: nobody}}
- name: ipam
  context:
    cluster: k
    user: node
    namespace: kube-system
clusters:
- name: k
  cluster:
{cluster}
users:
- name: node
  user:
{user}
preferences: {{}}
"
    )
}

fn error(yaml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = kubeconfig(&dir, yaml);
    match Kubeconfig::read(&path) {
        Ok(k) => panic!("{yaml}\nread as {k:?}"),
        Err(Error::Settings { kubeconfig, message }) => {
            assert_eq!(kubeconfig, path);
            message
        }
        Err(other) => panic!("not a settings error: {other:?}"),
    }
}

#[test]
fn a_token_file_and_a_ca_file_relative_to_the_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(testdata("ca.crt"), dir.path().join("ca.crt")).unwrap();
    std::fs::write(dir.path().join("token"), "eyJhbGciOi.x.y\n").unwrap();
    let path = kubeconfig(
        &dir,
        &with(
            "    server: https://10.0.0.1:6443/k8s/clusters/c-1/\n    certificate-authority: ca.crt",
            "    tokenFile: token",
        ),
    );
    let k = Kubeconfig::read(&path).unwrap();
    assert_eq!(k.server, Server { host: "10.0.0.1".into(), port: 6443, base_path: "/k8s/clusters/c-1".into() });
    assert_eq!(k.server_name, ServerName::try_from("10.0.0.1").unwrap());
    assert_eq!(k.token.as_deref(), Some("eyJhbGciOi.x.y"), "the file's trailing newline is not the token's");
    assert!(k.identity.is_none());
    assert_eq!(k.ca.certificates.len(), 1);
    assert!(k.ca.setting.contains("cluster \"k\" certificate-authority") && k.ca.setting.contains("ca.crt"));
}

#[test]
fn inline_data_a_client_certificate_and_a_server_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = kubeconfig(
        &dir,
        &with(
            &format!(
                "    server: https://[fd00::1]\n    tls-server-name: kubernetes.default.svc\n    \
                 certificate-authority-data: {}",
                base64_of(&testdata("ca.crt"))
            ),
            &format!(
                "    client-certificate-data: {}\n    client-key: {}",
                base64_of(&testdata("client.crt")),
                testdata("client.key").display()
            ),
        ),
    );
    let k = Kubeconfig::read(&path).unwrap();
    assert_eq!(k.server, Server { host: "fd00::1".into(), port: 443, base_path: String::new() });
    assert_eq!(k.server_name, ServerName::try_from("kubernetes.default.svc").unwrap());
    assert!(k.token.is_none());
    let (chain, _key) = k.identity.expect("the client certificate");
    assert_eq!(chain.len(), 1);
    assert_eq!(k.ca.setting, "cluster \"k\" certificate-authority-data");
}

#[test]
fn each_unusable_kubeconfig_is_named_with_what_is_wrong() {
    let ca = format!("    server: https://10.0.0.1:6443\n    certificate-authority: {}", testdata("ca.crt").display());
    let token = "    token: abc";
    let cases: Vec<(String, &str)> = vec![
        ("{}".into(), "no current-context"),
        ("current-context: x\nclusters: [\n".into(), "not a kubeconfig"),
        (
            with(&ca, token).replace("current-context: ipam", "current-context: gone"),
            "current-context names context \"gone\", which is not in the file",
        ),
        (
            with(&ca, token).replace("cluster: k\n", "cluster: elsewhere\n"),
            "context \"ipam\" names cluster \"elsewhere\"",
        ),
        (with(&ca, token).replace("- name: node", "- name: other-user"), "context \"ipam\" names user \"node\""),
        (
            with(&format!("    certificate-authority: {}", testdata("ca.crt").display()), token),
            "cluster \"k\" has no server",
        ),
        (with(&ca.replace("https://", "http://"), token), "is not an https:// URL"),
        (with(&ca.replace(":6443", ":http"), token), "\"http\" is not a port"),
        (
            with("    server: https://10.0.0.1\n    certificate-authority: /nonexistent/ca.crt", token),
            "cluster \"k\" certificate-authority (/nonexistent/ca.crt): unreadable",
        ),
        (
            with("    server: https://10.0.0.1\n    certificate-authority-data: '%%%'", token),
            "certificate-authority-data: not base64",
        ),
        (
            with(
                &format!(
                    "    server: https://10.0.0.1\n    certificate-authority: {}",
                    testdata("client.key").display()
                ),
                token,
            ),
            "no PEM certificate",
        ),
        (with(&format!("{ca}\n    insecure-skip-tls-verify: true"), token), "insecure-skip-tls-verify"),
        (with(&ca, "    tokenFile: /nonexistent/token"), "user \"node\" tokenFile (/nonexistent/token): unreadable"),
        (with(&ca, "    tokenFile: /dev/null"), "user \"node\" tokenFile (/dev/null): empty"),
        (with(&ca, "    token: ''"), "user \"node\" token is empty"),
        (with(&ca, "    username: admin"), "user \"node\" has no credentials"),
        (with(&ca, "    exec: {command: aws, apiVersion: client.authentication.k8s.io/v1}"), "from a plugin"),
        (
            with(&ca, &format!("    client-certificate: {}", testdata("client.crt").display())),
            "has a client-certificate but no client-key",
        ),
        (
            with(
                &ca,
                &format!(
                    "    client-certificate: {}\n    client-key: {}",
                    testdata("client.crt").display(),
                    testdata("ca.crt").display()
                ),
            ),
            "client-key: no PEM private key",
        ),
    ];
    for (yaml, expected) in cases {
        let message = error(&yaml);
        assert!(message.contains(expected), "{expected:?} not in {message:?}");
    }
}

#[test]
fn a_missing_or_huge_kubeconfig_is_named() {
    let missing = Kubeconfig::read(Path::new("/nonexistent/node.kubeconfig")).unwrap_err();
    assert!(missing.to_string().starts_with("/nonexistent/node.kubeconfig: "), "{missing}");
    let huge = Kubeconfig::read(Path::new("/dev/zero")).unwrap_err();
    assert!(huge.to_string().contains("longer than"), "{huge}");
}
