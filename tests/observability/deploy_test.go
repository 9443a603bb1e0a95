package observability

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/spiderpool/spiderpool/tests/harness"
)

func readYAML(t *testing.T, rel string, v any) {
	t.Helper()
	b, err := os.ReadFile(repoFile(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

// yamlDocs reads every document of a multi-document YAML file.
func yamlDocs(t *testing.T, rel string) []map[string]any {
	t.Helper()
	f, err := os.Open(repoFile(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var docs []map[string]any
	for {
		var d map[string]any
		if err := dec.Decode(&d); err != nil {
			if err.Error() == "EOF" {
				return docs
			}
			t.Fatalf("%s: %v", rel, err)
		}
		docs = append(docs, d)
	}
}

type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
}

// makeImage is the image `make image` builds by default (IMAGE ?= ...).
func makeImage(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(repoFile(t, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^IMAGE \?= (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("Makefile has no IMAGE ?= default")
	}
	return string(m[1])
}

// TestComposeFile checks docker-compose.yml: compose's loader validates it
// as `docker compose config` does (the schema, interpolation, every
// reference resolving), and the nodes run the image the Makefile builds
// and reach Postgres through PgBouncer (Temporal straight), ports are
// published on loopback unless the user says otherwise, and Prometheus and
// Grafana are wired to the nodes and the dashboard.
func TestComposeFile(t *testing.T) {
	if _, err := harness.LoadCompose(t, "docker-compose.yml"); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}

	var c composeFile
	readYAML(t, "docker-compose.yml", &c)
	image := makeImage(t)
	var nodes []string
	for name, s := range c.Services {
		if s.Image == "" && s.Build == nil {
			t.Errorf("service %s has neither image nor build", name)
		}
		if strings.HasSuffix(s.Image, ":latest") || (s.Image != "" && !strings.Contains(strings.TrimPrefix(s.Image, "${"), ":")) {
			t.Errorf("service %s runs %q: an untagged or latest image", name, s.Image)
		}
		// compose checks that named volumes are declared, not that the
		// repository's files a service mounts exist.
		for _, v := range s.Volumes {
			if src, _, _ := strings.Cut(v, ":"); strings.HasPrefix(src, ".") {
				if _, err := os.Stat(repoFile(t, src)); err != nil {
					t.Errorf("service %s mounts %s: %v", name, src, err)
				}
			}
		}
		if len(s.Command) > 0 && s.Command[0] == "worker" {
			nodes = append(nodes, name)
			if want := "${SPIDERPOOL_IMAGE:-" + image + "}"; s.Image != want {
				t.Errorf("node %s runs image %q, want %q: the image `make image` builds", name, s.Image, want)
			}
			if s.Environment["SPIDERPOOL_METRICS_ADDR"] != ":9090" {
				t.Errorf("node %s serves metrics on %q, want :9090", name, s.Environment["SPIDERPOOL_METRICS_ADDR"])
			}
		}
	}
	slices.Sort(nodes)
	if len(nodes) == 0 {
		t.Fatal("no node services (command worker ...)")
	}
	for _, n := range nodes {
		checkThroughPgBouncer(t, c, n)
	}
	if seeds := c.Services["temporal"].Environment["POSTGRES_SEEDS"]; seeds != "postgres" {
		t.Errorf("Temporal reaches Postgres at %q, want the postgres service itself", seeds)
	}
	// Published on loopback unless the user says otherwise.
	for name, s := range c.Services {
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, publishAddr+":") && !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("service %s publishes %q on every interface: want %s:host:container", name, p, publishAddr)
			}
		}
	}

	// Prometheus scrapes exactly the nodes.
	var prom struct {
		ScrapeConfigs []struct {
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "deploy/prometheus/prometheus.yml", &prom)
	var targets []string
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	var want []string
	for _, n := range nodes {
		want = append(want, n+":9090")
	}
	slices.Sort(targets)
	if !slices.Equal(targets, want) {
		t.Errorf("Prometheus scrapes %q, want the compose nodes %q", targets, want)
	}
	if !slices.ContainsFunc(c.Services["prometheus"].Volumes, func(v string) bool {
		return strings.HasPrefix(v, "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml")
	}) {
		t.Errorf("the prometheus service does not mount deploy/prometheus/prometheus.yml: %q", c.Services["prometheus"].Volumes)
	}

	// Grafana: the dashboards folder is where its provider looks, and its
	// data sources are those the dashboard names.
	var provider struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "deploy/grafana/provisioning/dashboards/spiderpool.yml", &provider)
	if len(provider.Providers) != 1 || !slices.Contains(c.Services["grafana"].Volumes, "./deploy/grafana/dashboards:"+provider.Providers[0].Options.Path+":ro") {
		t.Errorf("Grafana's dashboard provider %+v does not read the mounted deploy/grafana/dashboards (%q)", provider, c.Services["grafana"].Volumes)
	}
	var sources struct {
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, "deploy/grafana/provisioning/datasources/spiderpool.yml", &sources)
	uids := map[string]string{}
	for _, ds := range sources.Datasources {
		uids[ds.UID] = ds.URL
	}
	if uids["prometheus"] != "http://prometheus:9090" || uids["postgres"] != "postgres:5432" {
		t.Errorf("data sources %+v: want prometheus at http://prometheus:9090 and postgres at postgres:5432", sources.Datasources)
	}
	for _, svc := range []string{"prometheus", "postgres"} {
		if _, ok := c.Services[svc]; !ok {
			t.Errorf("a data source points at service %s, which compose does not run", svc)
		}
	}
}

// publishAddr is the host address compose publishes ports on: 127.0.0.1
// unless SPIDERPOOL_PUBLISH_ADDR says otherwise.
const publishAddr = "${SPIDERPOOL_PUBLISH_ADDR:-127.0.0.1}"

// checkThroughPgBouncer: node's DATABASE_URL names a service that runs
// PgBouncer in transaction mode, and asks pgx for unnamed statements,
// which PgBouncer's transaction pooling cannot break.
func checkThroughPgBouncer(t *testing.T, c composeFile, node string) {
	t.Helper()
	raw := c.Services[node].Environment["DATABASE_URL"]
	u, err := url.Parse(raw)
	if err != nil {
		t.Errorf("node %s: DATABASE_URL %q: %v", node, raw, err)
		return
	}
	if mode := u.Query().Get("default_query_exec_mode"); mode != "cache_describe" {
		t.Errorf("node %s: DATABASE_URL %q has default_query_exec_mode %q, want cache_describe", node, raw, mode)
	}
	bouncer, ok := c.Services[u.Hostname()]
	switch {
	case !ok:
		t.Errorf("node %s: DATABASE_URL names host %q, which compose does not run", node, u.Hostname())
		return
	case !strings.Contains(bouncer.Image, "pgbouncer"):
		t.Errorf("node %s reaches Postgres through service %s, which runs %q, not PgBouncer", node, u.Hostname(), bouncer.Image)
		return
	case bouncer.Environment["POOL_MODE"] != "transaction":
		t.Errorf("PgBouncer service %s pools in mode %q, want transaction", u.Hostname(), bouncer.Environment["POOL_MODE"])
	}
	ignored := strings.Split(bouncer.Environment["IGNORE_STARTUP_PARAMETERS"], ",")
	for _, p := range []string{"extra_float_digits", "jit"} {
		if !slices.Contains(ignored, p) {
			t.Errorf("PgBouncer service %s does not ignore the startup parameter %s, which pgx sends: it would refuse the nodes", u.Hostname(), p)
		}
	}
}

// TestComposeValidationRejectsAnUnknownKey: the validation TestComposeFile
// relies on fails on a copy of docker-compose.yml with a key compose does
// not know, and names the key.
func TestComposeValidationRejectsAnUnknownKey(t *testing.T) {
	b, err := os.ReadFile(repoFile(t, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	firstService := regexp.MustCompile(`(?m)^services:\n  [\w-]+:\n`)
	loc := firstService.FindIndex(b)
	if loc == nil {
		t.Fatal("docker-compose.yml: no services: block with a service under it")
	}
	const key = "spiderpool_no_such_key"
	broken := slices.Concat(b[:loc[1]], []byte("    "+key+": true\n"), b[loc[1]:])
	file := filepath.Join(t.TempDir(), "docker-compose.yml")
	if err := os.WriteFile(file, broken, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = harness.LoadCompose(t, file)
	if err == nil {
		t.Fatalf("compose accepted a service with the key %s", key)
	}
	if !strings.Contains(err.Error(), key) {
		t.Errorf("compose rejected the file without naming %s: %v", key, err)
	}
}

// TestKubernetesManifests: the ServiceMonitor selects the nodes' Service
// and scrapes its metrics port, which is the container's; the nodes run
// the Makefile's image as non-root, and reach Postgres through PgBouncer.
func TestKubernetesManifests(t *testing.T) {
	var service, statefulset map[string]any
	for _, d := range yamlDocs(t, "deploy/kubernetes/spiderpool.yaml") {
		switch d["kind"] {
		case "Service":
			service = d
		case "StatefulSet":
			statefulset = d
		}
	}
	if service == nil || statefulset == nil {
		t.Fatal("spiderpool.yaml lacks the Service or the StatefulSet")
	}
	mons := yamlDocs(t, "deploy/kubernetes/servicemonitor.yaml")
	if len(mons) != 1 || mons[0]["kind"] != "ServiceMonitor" || mons[0]["apiVersion"] != "monitoring.coreos.com/v1" {
		t.Fatalf("servicemonitor.yaml: %v", mons)
	}
	mon := mons[0]
	labels := get(service, "metadata", "labels").(map[string]any)
	for k, v := range get(mon, "spec", "selector", "matchLabels").(map[string]any) {
		if labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%v; the Service has labels %v", k, v, labels)
		}
	}
	var portNames []string
	targetPort := map[string]any{}
	for _, p := range get(service, "spec", "ports").([]any) {
		p := p.(map[string]any)
		portNames = append(portNames, fmt.Sprint(p["name"]))
		targetPort[fmt.Sprint(p["name"])] = p["targetPort"]
	}
	container := get(statefulset, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
	var containerPorts []string
	for _, p := range container["ports"].([]any) {
		containerPorts = append(containerPorts, fmt.Sprint(p.(map[string]any)["name"]))
	}
	for _, ep := range get(mon, "spec", "endpoints").([]any) {
		port := fmt.Sprint(ep.(map[string]any)["port"])
		if !slices.Contains(portNames, port) {
			t.Errorf("the ServiceMonitor scrapes port %q; the Service has %q", port, portNames)
		} else if !slices.Contains(containerPorts, fmt.Sprint(targetPort[port])) {
			t.Errorf("Service port %s targets %v; the container has ports %q", port, targetPort[port], containerPorts)
		}
	}
	if image := makeImage(t); container["image"] != image {
		t.Errorf("the nodes run image %v, want %s (make image)", container["image"], image)
	}
	sc, _ := get(statefulset, "spec", "template", "spec", "securityContext").(map[string]any)
	if sc["runAsNonRoot"] != true {
		t.Errorf("the node pods may run as root: securityContext %v", sc)
	}
	checkKubernetesPgBouncer(t)
}

// checkKubernetesPgBouncer: pgbouncer.yaml runs PgBouncer in transaction
// mode behind a Service that selects it, and the DATABASE_URL
// spiderpool.yaml says to put in the nodes' secret names that Service, with
// cache_describe.
func checkKubernetesPgBouncer(t *testing.T) {
	t.Helper()
	var service, deployment map[string]any
	for _, d := range yamlDocs(t, "deploy/kubernetes/pgbouncer.yaml") {
		switch d["kind"] {
		case "Service":
			service = d
		case "Deployment":
			deployment = d
		}
	}
	if service == nil || deployment == nil {
		t.Fatal("pgbouncer.yaml lacks the Service or the Deployment")
	}
	podLabels := get(deployment, "spec", "template", "metadata", "labels").(map[string]any)
	for k, v := range get(service, "spec", "selector").(map[string]any) {
		if podLabels[k] != v {
			t.Errorf("the PgBouncer Service selects %s=%v; its pods have labels %v", k, v, podLabels)
		}
	}
	container := get(deployment, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
	env := map[string]string{}
	for _, e := range container["env"].([]any) {
		e := e.(map[string]any)
		env[fmt.Sprint(e["name"])] = fmt.Sprint(e["value"])
	}
	if env["POOL_MODE"] != "transaction" {
		t.Errorf("PgBouncer pools in mode %q, want transaction", env["POOL_MODE"])
	}
	for _, p := range []string{"extra_float_digits", "jit"} {
		if !slices.Contains(strings.Split(env["IGNORE_STARTUP_PARAMETERS"], ","), p) {
			t.Errorf("PgBouncer does not ignore the startup parameter %s, which pgx sends: it would refuse the nodes", p)
		}
	}
	var containerPorts []string
	for _, p := range container["ports"].([]any) {
		containerPorts = append(containerPorts, fmt.Sprint(p.(map[string]any)["name"]))
	}
	var port string
	for _, p := range get(service, "spec", "ports").([]any) {
		p := p.(map[string]any)
		if !slices.Contains(containerPorts, fmt.Sprint(p["targetPort"])) {
			t.Errorf("the PgBouncer Service targets port %v; the container has %q", p["targetPort"], containerPorts)
		}
		port = fmt.Sprint(p["port"])
	}

	b, err := os.ReadFile(repoFile(t, "deploy/kubernetes/spiderpool.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`--from-literal=DATABASE_URL='([^']+)'`).FindSubmatch(b)
	if m == nil {
		t.Fatal("spiderpool.yaml does not show the DATABASE_URL to put in the nodes' secret")
	}
	u, err := url.Parse(string(m[1]))
	if err != nil {
		t.Fatalf("spiderpool.yaml's DATABASE_URL %q: %v", m[1], err)
	}
	name := fmt.Sprint(get(service, "metadata", "name"))
	if u.Hostname() != name || u.Port() != port || u.Query().Get("default_query_exec_mode") != "cache_describe" {
		t.Errorf("spiderpool.yaml's DATABASE_URL %q: want it through the PgBouncer Service %s:%s with default_query_exec_mode=cache_describe", u, name, port)
	}
}

func get(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

// TestImageRunsAsNonRootWithVersion reads deploy/Dockerfile: its image is
// distroless :nonroot, runs as that user, and stamps the version.
func TestImageRunsAsNonRootWithVersion(t *testing.T) {
	b, err := os.ReadFile(repoFile(t, "deploy/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	froms := regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllSubmatch(b, -1)
	if len(froms) == 0 || !strings.HasSuffix(string(froms[len(froms)-1][1]), ":nonroot") {
		t.Errorf("the final stage is not a :nonroot image: %q", froms)
	}
	users := regexp.MustCompile(`(?m)^USER (\S+)`).FindAllSubmatch(b, -1)
	if len(users) == 0 || (string(users[len(users)-1][1]) != "65532:65532" && string(users[len(users)-1][1]) != "nonroot:nonroot") {
		t.Errorf("the image's user is not nonroot: %q", users)
	}
	for _, want := range []string{"-X main.version=${VERSION}", "-X main.commit=${COMMIT}"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the Dockerfile's build does not stamp %s", want)
		}
	}
}
