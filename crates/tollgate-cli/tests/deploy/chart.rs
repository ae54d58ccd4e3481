//! The chart's choices rendered and checked: interception with its CA from a Secret,
//! the Redis URL and admin token put in Secrets of the chart's, a rollout that does not
//! answer 503 (preStop, grace period), PodDisruptionBudget and HPA, the values schema
//! (tollgate's own config schema inside it), `helm test` and NOTES.txt.

use super::{REDIS_SECRET, ROOT, chart, check, helm, helm_refuses, rendered};
use std::process::Command;
use yaml_serde::Value;

/// Interception, and the Redis URL and admin token as values the chart puts in Secrets.
const EVERYTHING: [&str; 8] = [
    "--set",
    "redis.url=redis://:pw@redis:6379/0",
    "--set",
    "adminToken.value=s3cret",
    "--set",
    "intercept.caSecret=tollgate-ca",
    "--set",
    "config.intercept.hosts={api.openai.com}",
];

/// Every document `helm template` renders with `set`.
fn documents(set: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut args = vec!["template", "t", &chart];
    args.extend(set);
    let text = helm(&args);
    text.split("\n---")
        .filter_map(|d| yaml_serde::from_str::<Value>(d).ok())
        .filter(|v| !v.is_null())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str) -> Option<&'a Value> {
    docs.iter().find(|d| d["kind"].as_str() == Some(kind))
}

fn secrets(docs: &[Value]) -> Vec<&Value> {
    docs.iter()
        .filter(|d| d["kind"].as_str() == Some("Secret"))
        .collect()
}

/// The rendered `helm test` pod's script run here with bash, the Service's name and
/// admin port replaced by 127.0.0.1 and `admin`: whether it passed, and its stderr.
pub fn helm_test_script(set: &[&str], admin: u16) -> (bool, String) {
    let pod = rendered("templates/tests/healthz.yaml", set);
    assert_eq!(pod["kind"].as_str(), Some("Pod"));
    assert_eq!(
        pod["metadata"]["annotations"]["helm.sh/hook"].as_str(),
        Some("test")
    );
    let command = pod["spec"]["containers"][0]["command"]
        .as_sequence()
        .unwrap();
    assert_eq!(command[0].as_str(), Some("bash"));
    let script = command[2].as_str().unwrap().replace(
        "/dev/tcp/t-tollgate/8081",
        &format!("/dev/tcp/127.0.0.1/{admin}"),
    );
    assert!(
        script.contains("127.0.0.1"),
        "the Service's address: {script}"
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn interception_redis_and_the_admin_token_render_to_a_config_check_accepts() {
    let dir = tempfile::tempdir().unwrap();
    // The CA as values.yaml says to make it, mounted as the Secret's volume would be.
    let ca = dir.path().join("ca");
    let made = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["ca", "init", "--data-dir"])
        .arg(&ca)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let mount = dir.path().join("mount");
    std::fs::create_dir(&mount).unwrap();
    std::fs::copy(ca.join("tollgate-ca.pem"), mount.join("tls.crt")).unwrap();
    std::fs::copy(ca.join("tollgate-ca-key.pem"), mount.join("tls.key")).unwrap();

    let docs = documents(&EVERYTHING);
    // The Secrets the chart made, and the variables the pod takes from them.
    let mut env = Vec::new();
    let dep = find(&docs, "Deployment").unwrap();
    let pod = &dep["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    for e in c["env"].as_sequence().unwrap() {
        let Some(r) = e["valueFrom"].get("secretKeyRef") else {
            continue;
        };
        let secret = secrets(&docs)
            .into_iter()
            .find(|s| s["metadata"]["name"] == r["name"])
            .unwrap_or_else(|| panic!("no Secret {:?} rendered", r["name"]));
        let value = secret["stringData"][r["key"].as_str().unwrap()]
            .as_str()
            .unwrap();
        env.push((e["name"].as_str().unwrap().to_owned(), value.to_owned()));
    }
    let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["REDIS_URL", "TOLLGATE_ADMIN_TOKEN"], "{env:?}");
    assert_eq!(env[0].1, "redis://:pw@redis:6379/0");

    // The CA Secret's volume, its key readable by the pod's group only (tollgate refuses
    // a key other users can read), mounted where the config says.
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "ca")
        .expect("a CA volume");
    assert_eq!(volume["secret"]["secretName"].as_str(), Some("tollgate-ca"));
    assert_eq!(volume["secret"]["defaultMode"].as_u64(), Some(0o440));
    assert_eq!(pod["securityContext"]["fsGroup"].as_u64(), Some(10001));
    let ca_mount = c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "ca")
        .expect("the CA volume is mounted");
    let mount_path = ca_mount["mountPath"].as_str().unwrap();

    let cm = find(&docs, "ConfigMap").unwrap();
    let config = cm["data"]["tollgate.yaml"].as_str().unwrap();
    let parsed: Value = yaml_serde::from_str(config).unwrap();
    assert_eq!(
        parsed["intercept"]["ca"]["key_file"].as_str(),
        Some(format!("{mount_path}/tls.key").as_str())
    );
    assert_eq!(
        parsed["admin"]["token"].as_str(),
        Some("${TOLLGATE_ADMIN_TOKEN}")
    );
    assert_eq!(parsed["store"]["expected_replicas"].as_u64(), Some(3));
    let local = config.replace(mount_path, &mount.display().to_string());
    std::fs::write(dir.path().join("tollgate.yaml"), local).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let key = mount.join("tls.key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o440)).unwrap();
    }
    check(&dir.path().join("tollgate.yaml"), &env);
}

#[test]
fn interception_without_a_ca_secret_and_redis_without_a_url_are_refused_with_the_fix() {
    let chart = chart();
    let no_url = helm_refuses(&["template", "t", &chart]);
    assert!(no_url.contains("set redis.url"), "{no_url}");
    let no_ca = helm_refuses(&[
        "template",
        "t",
        &chart,
        "--set",
        "redis.enabled=false",
        "--set",
        "config.intercept.hosts={api.openai.com}",
    ]);
    assert!(no_ca.contains("set intercept.caSecret"), "{no_ca}");
}

#[test]
fn a_rollout_waits_for_the_service_then_drains_within_the_grace_period() {
    let grace = |set: &[&str]| {
        let dep = rendered("templates/deployment.yaml", set);
        let pod = &dep["spec"]["template"]["spec"];
        let sleep = pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][1]
            .as_str()
            .map(|s| s.parse::<u64>().unwrap());
        (
            pod["terminationGracePeriodSeconds"].as_u64().unwrap(),
            sleep,
        )
    };
    // The default drain (30s): preStop 10 s, then 30 s, and 5 s to spare.
    assert_eq!(grace(&REDIS_SECRET), (45, Some(10)));
    let mut longer = REDIS_SECRET.to_vec();
    longer.extend(["--set-string", "config.shutdown.drain_timeout=2m"]);
    assert_eq!(grace(&longer), (135, Some(10)));
    let mut none = REDIS_SECRET.to_vec();
    none.extend(["--set", "shutdown.preStopSeconds=0"]);
    assert_eq!(grace(&none), (35, None));
    let chart = chart();
    let odd = helm_refuses(&[
        "template",
        "t",
        &chart,
        "--set",
        "redis.enabled=false",
        "--set-string",
        "config.shutdown.drain_timeout=1m30s",
    ]);
    assert!(
        odd.contains("shutdown.terminationGracePeriodSeconds"),
        "{odd}"
    );
}

#[test]
fn a_budget_limits_disruptions_and_the_autoscaler_owns_the_replica_count() {
    let docs = documents(&REDIS_SECRET);
    let pdb = find(&docs, "PodDisruptionBudget").expect("a PodDisruptionBudget by default");
    assert_eq!(pdb["spec"]["maxUnavailable"].as_u64(), Some(1));
    assert!(find(&docs, "HorizontalPodAutoscaler").is_none());
    assert_eq!(
        find(&docs, "Deployment").unwrap()["spec"]["replicas"].as_u64(),
        Some(3)
    );

    let mut set = REDIS_SECRET.to_vec();
    set.extend([
        "--set",
        "autoscaling.enabled=true",
        "--set",
        "autoscaling.maxReplicas=8",
        // The OpenTelemetry variables (or any) for the container, as Kubernetes writes them.
        "--set",
        "extraEnv[0].name=OTEL_SERVICE_NAME",
        "--set",
        "extraEnv[0].value=egress",
        // Replicas spread over nodes: the chart fills in the pods' selector.
        "--set",
        "topologySpreadConstraints[0].maxSkew=1",
        "--set",
        "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
        "--set",
        "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
    ]);
    let docs = documents(&set);
    let hpa = find(&docs, "HorizontalPodAutoscaler").expect("an HPA");
    assert_eq!(hpa["spec"]["maxReplicas"].as_u64(), Some(8));
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["name"].as_str(),
        Some("t-tollgate")
    );
    let dep = find(&docs, "Deployment").unwrap();
    assert!(dep["spec"].get("replicas").is_none(), "the HPA sets it");
    let env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_sequence()
        .unwrap();
    assert!(
        env.iter()
            .any(|e| e["name"] == "OTEL_SERVICE_NAME" && e["value"] == "egress"),
        "{env:?}"
    );
    let spread = &dep["spec"]["template"]["spec"]["topologySpreadConstraints"][0];
    assert_eq!(
        spread["topologyKey"].as_str(),
        Some("kubernetes.io/hostname")
    );
    assert_eq!(
        spread["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"].as_str(),
        Some("t")
    );
    // Each replica's share while Redis is away: of the most replicas there may be.
    let cm = find(&docs, "ConfigMap").unwrap();
    let config: Value =
        yaml_serde::from_str(cm["data"]["tollgate.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(config["store"]["expected_replicas"].as_u64(), Some(8));
}

#[test]
fn the_values_schema_holds_tollgates_config_schema_and_refuses_a_wrong_key() {
    // The config part of values.schema.json is tollgate's schema as `tollgate schema`
    // prints it (TOLLGATE_BLESS=1 writes it in).
    let path = format!("{ROOT}/deploy/helm/tollgate/values.schema.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut values: serde_json::Value = serde_json::from_str(&text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("schema")
        .output()
        .unwrap();
    let mut config: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let defs = config.as_object_mut().unwrap().remove("$defs").unwrap();
    let obj = config.as_object_mut().unwrap();
    obj.remove("$schema");
    obj.remove("title");
    obj.insert(
        "description".into(),
        values["properties"]["config"]["description"].clone(),
    );
    if values["properties"]["config"] != config || values["$defs"] != defs {
        if std::env::var_os("TOLLGATE_BLESS").is_some() {
            values["properties"]["config"] = config;
            values["$defs"] = defs;
            let mut text = serde_json::to_string_pretty(&values).unwrap();
            text.push('\n');
            std::fs::write(&path, text).unwrap();
        } else {
            panic!(
                "{path} holds another config schema than `tollgate schema`: run TOLLGATE_BLESS=1 cargo test -p tollgate-cli --test deploy schema"
            );
        }
    }

    let chart = chart();
    let lint = |extra: &[&str]| {
        let mut args = vec!["lint", &chart];
        args.extend(REDIS_SECRET);
        args.extend(extra);
        helm_refuses(&args)
    };
    let typo = lint(&["--set", "config.rate_limit.github.limit=5"]);
    assert!(
        typo.contains("Additional property rate_limit is not allowed"),
        "the misspelt key is named: {typo}"
    );
    let wrong = lint(&["--set", "config.rate_limits.github.limit=many"]);
    assert!(
        wrong.contains("config.rate_limits.github.limit"),
        "the field path: {wrong}"
    );
    let port = lint(&["--set", "service.port=0"]);
    assert!(port.contains("service.port"), "{port}");
}

/// NOTES.txt as `helm install` would print it with `set` (it is rendered only by
/// install: a copy of the chart renders it as a template of its own).
fn notes(set: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("tollgate");
    let status = Command::new("cp")
        .args(["-r", &chart()])
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    let notes = std::fs::read_to_string(copy.join("templates/NOTES.txt")).unwrap();
    std::fs::remove_file(copy.join("templates/NOTES.txt")).unwrap();
    std::fs::write(
        copy.join("templates/_notes.tpl"),
        format!("{{{{- define \"notes\" -}}}}\n{notes}{{{{- end -}}}}\n"),
    )
    .unwrap();
    std::fs::write(
        copy.join("templates/notes.yaml"),
        "notes: {{ include \"notes\" . | toJson }}\n",
    )
    .unwrap();
    let copy = copy.display().to_string();
    let mut args = vec![
        "template",
        "t",
        &copy,
        "--show-only",
        "templates/notes.yaml",
    ];
    args.extend(set);
    let text = helm(&args);
    let doc: Value = yaml_serde::from_str(&text).unwrap();
    doc["notes"].as_str().unwrap().to_owned()
}

#[test]
fn the_notes_say_how_to_reach_the_dashboard_and_trust_the_ca() {
    let notes = notes(&EVERYTHING);
    for expected in [
        "http://t-tollgate.default.svc:8000",
        "port-forward svc/t-tollgate 8081",
        "/ui",
        "kubectl get secret t-tollgate-admin",
        "Interception is on for api.openai.com",
        "kubectl get secret tollgate-ca",
        "helm test t",
    ] {
        assert!(notes.contains(expected), "{expected:?} in NOTES:\n{notes}");
    }
    assert!(!notes.contains("s3cret"), "the token is never printed");
}

/// An optional template: absent from the default render (`absent_mark` nowhere in it),
/// and its text when rendered with `set` (each a `--set` value).
fn optional(template: &str, absent_mark: &str, set: &[&str]) -> String {
    let chart = chart();
    let off = helm(&["template", "t", &chart, REDIS_SECRET[0], REDIS_SECRET[1]]);
    assert!(!off.contains(absent_mark), "{template}: off by default");
    let mut args = vec!["template", "t", &chart, REDIS_SECRET[0], REDIS_SECRET[1]];
    for s in set {
        args.extend(["--set", s]);
    }
    args.extend(["--show-only", template]);
    helm(&args)
}

#[test]
fn the_chart_ships_the_grafana_dashboard_for_the_sidecar_when_asked() {
    let text = optional(
        "templates/grafana-dashboard.yaml",
        "grafana-dashboard",
        &[
            "grafanaDashboard.enabled=true",
            "grafanaDashboard.annotations.grafana_folder=tollgate",
        ],
    );
    let cm: Value = yaml_serde::from_str(&text).unwrap();
    assert_eq!(cm["kind"].as_str(), Some("ConfigMap"));
    assert_eq!(
        cm["metadata"]["labels"]["grafana_dashboard"].as_str(),
        Some("1")
    );
    assert_eq!(
        cm["metadata"]["annotations"]["grafana_folder"].as_str(),
        Some("tollgate")
    );
    let shipped = cm["data"]["tollgate.json"].as_str().unwrap();
    let canonical =
        std::fs::read_to_string(format!("{ROOT}/deploy/grafana/tollgate.json")).unwrap();
    assert_eq!(
        shipped.trim_end(),
        canonical.trim_end(),
        "the ConfigMap holds the dashboard as it is"
    );
}

#[test]
fn the_chart_ships_the_alerting_rules_as_a_prometheus_rule_when_asked() {
    let chart = chart();
    let text = optional(
        "templates/prometheusrule.yaml",
        "kind: PrometheusRule",
        &[
            "prometheusRule.enabled=true",
            "prometheusRule.labels.release=kps",
        ],
    );
    let rule: Value = yaml_serde::from_str(&text).unwrap();
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    assert_eq!(rule["metadata"]["labels"]["release"].as_str(), Some("kps"));
    // The plain file's rules, unchanged: `{{ $labels.name }}` in an annotation is left
    // for Prometheus, not read by Helm.
    let plain =
        std::fs::read_to_string(format!("{ROOT}/deploy/prometheus/tollgate-alerts.yaml")).unwrap();
    let copy = std::fs::read_to_string(format!("{chart}/alerts/tollgate-alerts.yaml")).unwrap();
    assert!(
        plain == copy,
        "copy deploy/prometheus/tollgate-alerts.yaml to deploy/helm/tollgate/alerts/"
    );
    let plain: Value = yaml_serde::from_str(&plain).unwrap();
    assert_eq!(rule["spec"]["groups"], plain["groups"]);
    assert!(text.contains("{{ $labels.name }}"), "{text}");
}

/// What the "restricted" Pod Security Standard (Kubernetes 1.30–1.37) refuses in a pod
/// spec, each rule as the admission controller checks it: host namespaces, privileged
/// containers, capabilities beyond `NET_BIND_SERVICE` or without `drop: [ALL]`, host
/// paths and ports, a non-default proc mount, an unconfined or missing seccomp profile,
/// privilege escalation, running as root, sysctls and volume types outside its list.
fn restricted_violations(spec: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for ns in ["hostNetwork", "hostPID", "hostIPC"] {
        if spec[ns].as_bool() == Some(true) {
            out.push(format!("{ns}: true"));
        }
    }
    let pod = &spec["securityContext"];
    if pod["sysctls"].as_sequence().is_some_and(|s| !s.is_empty()) {
        out.push("sysctls".into());
    }
    let allowed_volumes = [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ];
    for v in spec["volumes"].as_sequence().into_iter().flatten() {
        let kinds: Vec<&str> = v
            .as_mapping()
            .unwrap()
            .keys()
            .filter_map(|k| k.as_str())
            .filter(|k| *k != "name")
            .collect();
        if kinds.iter().any(|k| !allowed_volumes.contains(k)) {
            out.push(format!("volume {:?}", kinds));
        }
    }
    let seccomp_ok = |v: &Value| {
        matches!(
            v["seccompProfile"]["type"].as_str(),
            Some("RuntimeDefault" | "Localhost")
        )
    };
    let containers = ["initContainers", "containers", "ephemeralContainers"];
    for c in containers
        .iter()
        .flat_map(|k| spec[*k].as_sequence().into_iter().flatten())
    {
        let sc = &c["securityContext"];
        let name = c["name"].as_str().unwrap_or("?");
        if sc["privileged"].as_bool() == Some(true) {
            out.push(format!("{name}: privileged"));
        }
        if sc["allowPrivilegeEscalation"].as_bool() != Some(false) {
            out.push(format!("{name}: allowPrivilegeEscalation not false"));
        }
        let drops_all = sc["capabilities"]["drop"]
            .as_sequence()
            .is_some_and(|d| d.iter().any(|c| c.as_str() == Some("ALL")));
        if !drops_all {
            out.push(format!("{name}: capabilities.drop lacks ALL"));
        }
        let adds = sc["capabilities"]["add"]
            .as_sequence()
            .into_iter()
            .flatten();
        for a in adds {
            if a.as_str() != Some("NET_BIND_SERVICE") {
                out.push(format!("{name}: adds {a:?}"));
            }
        }
        let non_root = sc["runAsNonRoot"]
            .as_bool()
            .or(pod["runAsNonRoot"].as_bool());
        if non_root != Some(true) {
            out.push(format!("{name}: runAsNonRoot not true"));
        }
        if sc["runAsUser"].as_u64() == Some(0) || pod["runAsUser"].as_u64() == Some(0) {
            out.push(format!("{name}: runAsUser 0"));
        }
        if !(seccomp_ok(sc) || (sc["seccompProfile"].is_null() && seccomp_ok(pod))) {
            out.push(format!(
                "{name}: seccompProfile not RuntimeDefault or Localhost"
            ));
        }
        if sc["procMount"].as_str().is_some_and(|p| p != "Default") {
            out.push(format!("{name}: procMount"));
        }
        for p in c["ports"].as_sequence().into_iter().flatten() {
            if p["hostPort"].as_u64().is_some_and(|h| h != 0) {
                out.push(format!("{name}: hostPort"));
            }
        }
    }
    out
}

#[test]
fn the_pods_pass_the_restricted_pod_security_standard() {
    for set in [&[][..], &EVERYTHING[..]] {
        let mut args = REDIS_SECRET.to_vec();
        args.extend(set);
        let docs = documents(&args);
        let deployment = find(&docs, "Deployment").unwrap();
        let spec = &deployment["spec"]["template"]["spec"];
        assert_eq!(restricted_violations(spec), Vec::<String>::new(), "{set:?}");
        assert_eq!(spec["automountServiceAccountToken"].as_bool(), Some(false));
        let test_pod = rendered("templates/tests/healthz.yaml", &args);
        assert_eq!(
            restricted_violations(&test_pod["spec"]),
            Vec::<String>::new(),
            "the helm test pod"
        );
    }
    // The check itself refuses what the standard refuses.
    let loose: Value = yaml_serde::from_str(
        "containers: [{name: c, securityContext: {privileged: true}}]\nhostNetwork: true",
    )
    .unwrap();
    assert!(restricted_violations(&loose).len() >= 5);
}

/// The image named as docs/deploy.md says (a pushed image, a private registry's Secret)
/// is what the pods and the test pod run.
#[test]
fn the_pods_run_the_image_named_with_its_pull_secret() {
    let mut args = REDIS_SECRET.to_vec();
    args.extend([
        "--set",
        "image.repository=registry.example.com/platform/tollgate",
        "--set",
        "image.tag=0.1.0-rc1",
        "--set",
        "imagePullSecrets[0].name=registry",
    ]);
    let docs = documents(&args);
    let pod = &find(&docs, "Deployment").unwrap()["spec"]["template"]["spec"];
    let test_pod = rendered("templates/tests/healthz.yaml", &args);
    for spec in [pod, &test_pod["spec"]] {
        assert_eq!(
            spec["containers"][0]["image"].as_str(),
            Some("registry.example.com/platform/tollgate:0.1.0-rc1")
        );
        assert_eq!(
            spec["imagePullSecrets"][0]["name"].as_str(),
            Some("registry")
        );
    }
    let chart = chart();
    let mut lint = vec!["lint", chart.as_str()];
    lint.extend(REDIS_SECRET);
    lint.extend(["--set", "imagePullSecrets[0].secret=registry"]);
    let refused = helm_refuses(&lint);
    assert!(refused.contains("imagePullSecrets"), "{refused}");
}

#[test]
fn the_service_monitor_scrapes_with_the_token_the_chart_holds() {
    let docs = documents(&[
        "--set",
        "redis.enabled=false",
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "adminToken.value=s3cret",
    ]);
    let sm = find(&docs, "ServiceMonitor").unwrap();
    let bearer = &sm["spec"]["endpoints"][0]["bearerTokenSecret"];
    assert_eq!(bearer["name"].as_str(), Some("t-tollgate-admin"));
    assert_eq!(bearer["key"].as_str(), Some("token"));
    let named = documents(&[
        "--set",
        "redis.enabled=false",
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "adminToken.existingSecret=ops-admin",
    ]);
    let sm = find(&named, "ServiceMonitor").unwrap();
    assert_eq!(
        sm["spec"]["endpoints"][0]["bearerTokenSecret"]["name"].as_str(),
        Some("ops-admin")
    );
}

#[test]
fn a_changed_secret_rolls_the_pods() {
    let annotation = |token: &str| {
        let set = format!("adminToken.value={token}");
        let mut args = REDIS_SECRET.to_vec();
        args.extend(["--set", set.as_str()]);
        let docs = documents(&args);
        find(&docs, "Deployment").unwrap()["spec"]["template"]["metadata"]["annotations"]
            ["checksum/secret"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_ne!(annotation("one"), annotation("two"));
    assert_eq!(annotation("one"), annotation("one"));
}

#[test]
fn a_ca_secret_without_hosts_renders_and_says_so() {
    // It failed lint, template and install: `nil pointer evaluating interface {}.hosts`.
    let mut set = REDIS_SECRET.to_vec();
    set.extend(["--set", "intercept.caSecret=tollgate-ca"]);
    let notes = notes(&set);
    assert!(
        notes.contains("no host yet: set config.intercept.hosts"),
        "{notes}"
    );
    let mut lint = vec!["lint", "--strict"];
    let chart = chart();
    lint.push(&chart);
    lint.extend(&set);
    helm(&lint);
}
