//! Monitoring: the chart's alerts (`files/alerts.yaml`) and Grafana dashboard
//! (`files/dashboard.json`), checked with Prometheus's own tools, built from Go modules
//! (`tests/tools/build prometheus promtool`):
//!
//! - `promtool check rules` and `promtool test rules` (`tests/data/alerts/alerts.test.yaml`:
//!   series that fire each alert and series that do not);
//! - the chart renders them as a PrometheusRule and a dashboard ConfigMap, verbatim;
//! - a real Prometheus scrapes a running operator on a plane of this binary's own (a card
//!   published, a card refused, a directory whose upstream cannot be reached) with the rules
//!   loaded: every rule evaluates without error, and every metric each alert and dashboard
//!   query names exists in what the operator exposes, with every label the query matches on or
//!   groups by (and, for `label="value"`, a series with that value).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agentcard_operator::crd::AgentCard;
use agentcard_operator::yaml;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};
use support::cluster::card;
use support::http::{eventually, free_port, request};
use support::operator::{wait_card, Operator};
use support::plane::{client_for, dedicated_kubeconfig, TestNamespace};
use support::tools::Tool;

const ALERTS: &str = "charts/agentcard-operator/files/alerts.yaml";
const DASHBOARD: &str = "charts/agentcard-operator/files/dashboard.json";

fn promtool(args: &[&str]) -> String {
    let out = Command::new(Tool::Promtool.path())
        .args(args)
        .current_dir(support::root())
        .output()
        .expect("running promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

/// Every alerting rule of the rule file: `(name, expression)`.
fn alert_rules() -> Vec<(String, String)> {
    let rules: Value = yaml::from_str(&read(ALERTS)).unwrap();
    rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .map(|r| {
            (
                r["alert"].as_str().unwrap().to_string(),
                r["expr"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every query of the dashboard: `(panel title, expression)`, Grafana's interval variables
/// replaced by a range Prometheus parses.
fn dashboard_queries() -> Vec<(String, String)> {
    let dash: Value = serde_json::from_str(&read(DASHBOARD)).unwrap();
    dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap().to_string();
            p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |t| {
                    let expr = t["expr"]
                        .as_str()
                        .unwrap()
                        .replace("$__rate_interval", "1m")
                        .replace("$__interval", "1m");
                    (title.clone(), expr)
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(support::root().join(path)).unwrap()
}

#[test]
fn promtool_checks_the_rules_and_their_tests_fire_and_stay_quiet_as_written() {
    let checked = promtool(&["check", "rules", ALERTS]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", "tests/data/alerts/alerts.test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert has a test that fires it and a runbook section.
    let tests = read("tests/data/alerts/alerts.test.yaml");
    let runbooks = read("docs/runbooks.md");
    for (alert, _) in alert_rules() {
        assert!(
            tests.contains(&format!(
                "alertname: {alert}\n        exp_alerts:\n          - "
            )),
            "no promtool test fires {alert}"
        );
        assert!(
            runbooks.contains(&format!("\n## {alert}\n")),
            "docs/runbooks.md has no section for {alert}"
        );
        assert!(
            read(ALERTS).contains(&format!("runbooks.md#{}", alert.to_lowercase())),
            "{alert} links no runbook"
        );
    }
}

#[test]
fn the_chart_renders_the_rules_and_the_dashboard_verbatim_behind_their_values() {
    let kubeconfig = support::plane::kubeconfig();
    let template = |extra: &[&str]| -> Vec<Value> {
        let out = support::tools::helm_command(kubeconfig)
            .args([
                "template",
                "rel",
                "charts/agentcard-operator",
                "--namespace",
                "ops",
            ])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let docs: Vec<Value> =
            yaml::from_str_multiple(&String::from_utf8_lossy(&out.stdout)).unwrap();
        docs.into_iter().filter(Value::is_object).collect()
    };
    let kinds = |docs: &[Value]| -> Vec<String> {
        docs.iter()
            .map(|d| d["kind"].as_str().unwrap().to_string())
            .collect()
    };
    let plain = template(&[]);
    assert!(!kinds(&plain).contains(&"PrometheusRule".to_string()));
    assert!(!plain
        .iter()
        .any(|d| d["metadata"]["labels"]["grafana_dashboard"].is_string()));
    let on = template(&[
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "prometheusRule.labels.release=prom",
        "--set",
        "dashboard.enabled=true",
    ]);
    let rule = on.iter().find(|d| d["kind"] == "PrometheusRule").unwrap();
    assert_eq!(rule["metadata"]["namespace"], "ops");
    assert_eq!(rule["metadata"]["labels"]["release"], "prom");
    let file: Value = yaml::from_str(&read(ALERTS)).unwrap();
    assert_eq!(
        rule["spec"], file,
        "the PrometheusRule differs from {ALERTS}"
    );
    let dashboard = on
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"] == "1")
        .expect("a ConfigMap labelled for Grafana's sidecar");
    let json: Value = serde_json::from_str(
        dashboard["data"]["agentcard-operator.json"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let want: Value = serde_json::from_str(&read(DASHBOARD)).unwrap();
    assert_eq!(
        json, want,
        "the dashboard ConfigMap differs from {DASHBOARD}"
    );
}

/// A Prometheus server of this test, killed (with its process group) when dropped.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Scrape `target` (`host:port`, path `/metrics`) every second, with `rules` loaded.
    fn start(target: SocketAddr, rules: &Path) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 rule_files: ['{}']\n\
                 scrape_configs:\n\
                 - job_name: agentcard-operator\n  static_configs: [{{targets: ['{target}']}}]\n",
                rules.display()
            ),
        )
        .unwrap();
        let addr = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        use std::os::unix::process::CommandExt;
        let child = Command::new(Tool::Prometheus.path())
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("starting prometheus");
        let p = Prometheus {
            child,
            addr,
            _dir: dir,
        };
        eventually(Duration::from_secs(60), || {
            (std::net::TcpStream::connect(addr).is_ok()
                && request(addr, "GET", "/-/ready", &[("Host", "prometheus")]).status == 200)
                .then_some(())
        })
        .unwrap_or_else(|| panic!("prometheus did not become ready:\n{}", p.log()));
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET /api/v1/<path>?<query>`'s `data`, asserting success.
    fn api(&self, path: &str, query: &[(&str, &str)]) -> Value {
        let q: String = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(query)
            .finish();
        let r = request(
            self.addr,
            "GET",
            &format!("/api/v1/{path}?{q}"),
            &[("Host", "prometheus")],
        );
        let body: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        assert!(
            r.status == 200 && body["status"] == "success",
            "prometheus /api/v1/{path}?{q}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        body["data"].clone()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

/// What a query asks of one metric: the labels it matches on or groups by, and the values its
/// `label="value"` matchers require.
#[derive(Debug, Default)]
struct Needs {
    labels: BTreeSet<String>,
    values: BTreeSet<(String, String)>,
}

/// Walk a `parse_query` syntax tree: per metric name, what the query needs of its series.
/// `grouping` holds the labels of the aggregations and vector matchings above this node.
fn needs(node: &Value, grouping: &BTreeSet<String>, out: &mut BTreeMap<String, Needs>) {
    match node {
        Value::Object(m) => {
            let mut grouping = grouping.clone();
            if m.get("type").and_then(Value::as_str) == Some("aggregation")
                && m.get("without") != Some(&Value::Bool(true))
            {
                for l in m
                    .get("grouping")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    grouping.insert(l.as_str().unwrap_or_default().to_string());
                }
            }
            if let Some(matching) = m.get("matching").filter(|v| v.is_object()) {
                if matching["on"] == true {
                    for l in matching["labels"].as_array().into_iter().flatten() {
                        grouping.insert(l.as_str().unwrap_or_default().to_string());
                    }
                }
                for l in matching["include"].as_array().into_iter().flatten() {
                    grouping.insert(l.as_str().unwrap_or_default().to_string());
                }
            }
            if matches!(
                m.get("type").and_then(Value::as_str),
                Some("vectorSelector" | "matrixSelector")
            ) {
                let name = m["name"].as_str().unwrap_or_default().to_string();
                let entry = out.entry(name).or_default();
                // Prometheus adds these to every scraped series.
                entry.labels.extend(
                    grouping
                        .iter()
                        .filter(|l| !["job", "instance"].contains(&l.as_str()))
                        .cloned(),
                );
                for matcher in m["matchers"].as_array().into_iter().flatten() {
                    let label = matcher["name"].as_str().unwrap_or_default();
                    if label == "__name__" {
                        continue;
                    }
                    entry.labels.insert(label.to_string());
                    if matcher["type"] == "=" {
                        entry.values.insert((
                            label.to_string(),
                            matcher["value"].as_str().unwrap_or_default().to_string(),
                        ));
                    }
                }
            }
            for v in m.values() {
                needs(v, &grouping, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| needs(v, grouping, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scraping_the_operator_finds_every_metric_and_label_the_alerts_and_dashboard_use(
) {
    let kubeconfig = dedicated_kubeconfig();
    let client = client_for(kubeconfig).await;
    support::plane::install_crds(&client).await;
    let opns = TestNamespace::new(&client, "mon-op").await;
    let ns = TestNamespace::new(&client, "mon").await;
    let op = Operator::start_on(
        kubeconfig,
        &opns.name,
        Some(&ns.name),
        &["--allowed-hosts", "*.mon.test"],
    );
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), &ns.name);
    let pp = PatchParams::apply("test").force();
    for (name, host) in [
        ("good", "good.mon.test"),
        ("elsewhere", "elsewhere.example.org"),
    ] {
        cards
            .patch(name, &pp, &Patch::Apply(card(name, host, "")))
            .await
            .unwrap();
    }
    wait_card(&cards, "good", &op, "Ready", support::ready).await;
    wait_card(
        &cards,
        "elsewhere",
        &op,
        "HostNotAllowed",
        support::cluster::refused("HostNotAllowed"),
    )
    .await;
    // A directory whose only upstream cannot be reached (a name that never resolves).
    let dir_name = format!("mon-{}", support::plane::rand_u32());
    let dirs: Api<agentcard_operator::crd::AgentDirectory> = Api::all(client.clone());
    dirs.patch(
        &dir_name,
        &pp,
        &Patch::Apply(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDirectory",
            "metadata": {"name": dir_name},
            "spec": {"publish": {"host": "dir.mon.test"},
                     "upstreams": [{"name": "gone", "url": "https://upstream.invalid/"}]}
        })),
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(60), || {
        op.metrics()
            .contains(&format!(
                "agentcard_directory_upstream_up{{directory=\"{dir_name}\",upstream=\"gone\"}} 0"
            ))
            .then_some(())
    })
    .unwrap_or_else(|| panic!("no upstream gauge for {dir_name}:\n{}", op.metrics()));

    let rules = support::root().join(ALERTS);
    let prom = Prometheus::start(op.server.admin, &rules);
    // The target is scraped and the rules are evaluated.
    eventually(Duration::from_secs(60), || {
        let targets = prom.api("targets", &[]);
        (targets["activeTargets"][0]["health"] == "up").then_some(())
    })
    .unwrap_or_else(|| panic!("the operator was not scraped: {}", prom.api("targets", &[])));
    let loaded = eventually(Duration::from_secs(60), || {
        let groups = prom.api("rules", &[("type", "alert")]);
        let rules: Vec<Value> = groups["groups"]
            .as_array()?
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        (!rules.is_empty()
            && rules
                .iter()
                .all(|r| r["lastEvaluation"] != "0001-01-01T00:00:00Z"))
        .then_some(rules)
    })
    .expect("the rules were never evaluated");
    assert_eq!(loaded.len(), alert_rules().len());
    for r in &loaded {
        assert_eq!(
            r["health"], "ok",
            "rule {} does not evaluate: {r}",
            r["name"]
        );
    }

    // Every metric each query names, with every label it uses.
    let mut asked: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (owner, expr) in alert_rules()
        .into_iter()
        .map(|(a, e)| (format!("alert {a}"), e))
        .chain(
            dashboard_queries()
                .into_iter()
                .map(|(t, e)| (format!("panel {t:?}"), e)),
        )
    {
        let tree = prom.api("parse_query", &[("query", &expr)]);
        let mut found = BTreeMap::new();
        needs(&tree, &BTreeSet::new(), &mut found);
        assert!(!found.is_empty(), "{owner}: no metric in {expr}");
        for (metric, need) in found {
            let series = prom.api("series", &[("match[]", &metric)]);
            let series = series.as_array().unwrap();
            assert!(
                !series.is_empty(),
                "{owner}: the operator exposes no {metric}"
            );
            let labels: BTreeSet<&str> = series
                .iter()
                .flat_map(|s| s.as_object().unwrap().keys().map(String::as_str))
                .collect();
            for l in &need.labels {
                assert!(
                    labels.contains(l.as_str()),
                    "{owner}: {metric} has no label {l} (it has {labels:?})"
                );
            }
            for (l, v) in &need.values {
                assert!(
                    series.iter().any(|s| s[l] == v.as_str()),
                    "{owner}: no {metric} series has {l}={v:?}: {series:?}"
                );
            }
            asked.entry(metric).or_default().push(owner.clone());
        }
    }
    eprintln!("metrics the alerts and the dashboard use: {asked:#?}");
    let _ = dirs.delete(&dir_name, &Default::default()).await;
}
