package k8s_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kinds maps apiVersion/kind to a new typed object. A kind missing here is
// an error: every object the manifests hold must be checked.
var kinds = map[string]func() any{
	"v1/Namespace":                       func() any { return &corev1.Namespace{} },
	"v1/Service":                         func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                  func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":                       func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                          func() any { return &corev1.Secret{} },
	"v1/PersistentVolumeClaim":           func() any { return &corev1.PersistentVolumeClaim{} },
	"apps/v1/Deployment":                 func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                func() any { return &appsv1.StatefulSet{} },
	"batch/v1/CronJob":                   func() any { return &batchv1.CronJob{} },
	"policy/v1/PodDisruptionBudget":      func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy": func() any { return &networkingv1.NetworkPolicy{} },
	"cert-manager.io/v1/Certificate":     func() any { return &certificate{} },
	"cert-manager.io/v1/Issuer":          func() any { return &issuer{} },
	"cert-manager.io/v1/ClusterIssuer":   func() any { return &issuer{} },
}

// cert-manager's kinds are custom resources with no Go types among this
// module's dependencies. These structs hold the fields the manifests use,
// with cert-manager's JSON names; the strict decoder rejects any other
// field, so a misspelt one (or one nothing here checks) fails.
type certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              certificateSpec `json:"spec"`
}

type certificateSpec struct {
	SecretName  string           `json:"secretName"`
	IssuerRef   issuerRef        `json:"issuerRef"`
	IsCA        bool             `json:"isCA,omitempty"`
	CommonName  string           `json:"commonName,omitempty"`
	DNSNames    []string         `json:"dnsNames,omitempty"`
	IPAddresses []string         `json:"ipAddresses,omitempty"`
	Usages      []string         `json:"usages,omitempty"`
	Duration    *metav1.Duration `json:"duration,omitempty"`
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
	PrivateKey  *struct {
		Algorithm      string `json:"algorithm,omitempty"`
		Size           int    `json:"size,omitempty"`
		RotationPolicy string `json:"rotationPolicy,omitempty"`
	} `json:"privateKey,omitempty"`
}

type issuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`  // default Issuer
	Group string `json:"group,omitempty"` // default cert-manager.io
}

// issuer is an Issuer or a ClusterIssuer; only the two kinds of issuing
// the manifests use are known.
type issuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

// decodeStrict decodes one rendered object into its k8s.io/api type the
// way the API server does: field names are case-sensitive, and unknown or
// duplicate fields are errors.
func decodeStrict(js []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, err
	}
	newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("kind %s/%s is not one the validation knows", tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	strictErrs, err := kjson.UnmarshalStrict(js, obj, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, err
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("%s: %v", tm.Kind, strictErrs)
	}
	return obj, nil
}

// rendered is the typed output of one kustomization.
type rendered struct {
	dir          string
	objects      []any
	deployments  map[string]*appsv1.Deployment
	statefulSets map[string]*appsv1.StatefulSet
	cronJobs     map[string]*batchv1.CronJob
	services     map[string]*corev1.Service
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	pvcs         map[string]*corev1.PersistentVolumeClaim
	pdbs         map[string]*policyv1.PodDisruptionBudget
	netpols      map[string]*networkingv1.NetworkPolicy
	certificates map[string]*certificate
	issuers      map[string]*issuer // by "Issuer/<name>" or "ClusterIssuer/<name>"
}

// renderObjects runs kustomize on dir and decodes every object strictly.
func renderObjects(fs filesys.FileSystem, dir string) ([]any, error) {
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	var objs []any
	var errs []error
	for _, res := range resMap.Resources() {
		js, err := res.MarshalJSON()
		if err == nil {
			var obj any
			if obj, err = decodeStrict(js); err == nil {
				objs = append(objs, obj)
				continue
			}
		}
		errs = append(errs, fmt.Errorf("%s: %s: %w", dir, res.CurId(), err))
	}
	return objs, errors.Join(errs...)
}

func renderFS(t *testing.T, fs filesys.FileSystem, dir string) *rendered {
	t.Helper()
	objs, err := renderObjects(fs, dir)
	if err != nil {
		t.Error(err)
	}
	if len(objs) == 0 {
		t.Fatalf("%s rendered no objects", dir)
	}
	r := &rendered{
		dir:          dir,
		objects:      objs,
		deployments:  map[string]*appsv1.Deployment{},
		statefulSets: map[string]*appsv1.StatefulSet{},
		cronJobs:     map[string]*batchv1.CronJob{},
		services:     map[string]*corev1.Service{},
		configMaps:   map[string]*corev1.ConfigMap{},
		secrets:      map[string]*corev1.Secret{},
		pvcs:         map[string]*corev1.PersistentVolumeClaim{},
		pdbs:         map[string]*policyv1.PodDisruptionBudget{},
		netpols:      map[string]*networkingv1.NetworkPolicy{},
		certificates: map[string]*certificate{},
		issuers:      map[string]*issuer{},
	}
	for _, obj := range objs {
		switch o := obj.(type) {
		case *appsv1.Deployment:
			r.deployments[o.Name] = o
		case *appsv1.StatefulSet:
			r.statefulSets[o.Name] = o
		case *batchv1.CronJob:
			r.cronJobs[o.Name] = o
		case *corev1.Service:
			r.services[o.Name] = o
		case *corev1.ConfigMap:
			r.configMaps[o.Name] = o
		case *corev1.Secret:
			r.secrets[o.Name] = o
		case *corev1.PersistentVolumeClaim:
			r.pvcs[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			r.pdbs[o.Name] = o
		case *networkingv1.NetworkPolicy:
			r.netpols[o.Name] = o
		case *certificate:
			r.certificates[o.Name] = o
		case *issuer:
			r.issuers[o.Kind+"/"+o.Name] = o
		}
	}
	return r
}

// localSecretFiles are the files an operator writes before applying an
// overlay (overlays/s3/kustomization.yaml says which), here with test
// values. Git ignores them; an .example of each sits beside it.
var localSecretFiles = map[string]string{
	"overlays/s3/secrets/tokens":             "test-token ci\n",
	"overlays/s3/secrets/s3-credentials.env": "AWS_ACCESS_KEY_ID=test-access-key-id\nAWS_SECRET_ACCESS_KEY=test-secret-access-key\n",
}

// deployCopy copies base/ and overlays/ into a temporary directory, adds
// the files of fill (relative path -> content), and returns the copy.
func deployCopy(t *testing.T, fill map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"base", "overlays"} {
		if err := os.CopyFS(filepath.Join(root, d), os.DirFS(d)); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range fill {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// render renders dir (base or overlays/<name>) as an operator would, with
// the local secret files written.
func render(t *testing.T, dir string) *rendered {
	t.Helper()
	r := renderFS(t, filesys.MakeFsOnDisk(), filepath.Join(deployCopy(t, localSecretFiles), dir))
	r.dir = dir
	return r
}

// configMap returns the ConfigMap generated as name: kustomize appends a
// hash of the content to the name, so that a change rolls the pods.
func (r *rendered) configMap(t *testing.T, name string) *corev1.ConfigMap {
	t.Helper()
	re := regexp.MustCompile("^" + regexp.QuoteMeta(name) + "-[a-z0-9]{10}$")
	for n, cm := range r.configMaps {
		if re.MatchString(n) {
			return cm
		}
	}
	t.Fatalf("%s: no ConfigMap generated as %s (with a content hash)", r.dir, name)
	return nil
}

// kustomizations lists base/ and every overlay.
func kustomizations(t *testing.T) []string {
	t.Helper()
	dirs := []string{"base"}
	overlays, err := filepath.Glob("overlays/*/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range overlays {
		dirs = append(dirs, filepath.Dir(o))
	}
	if len(dirs) < 3 {
		t.Fatalf("found %v; want base and at least the s3 and dev overlays", dirs)
	}
	return dirs
}

// secretValue reads a key of a rendered Secret from data or stringData.
func secretValue(s *corev1.Secret, key string) (string, bool) {
	if v, ok := s.StringData[key]; ok {
		return v, true
	}
	if v, ok := s.Data[key]; ok {
		return string(v), true
	}
	return "", false
}

// containerEnv resolves a container's environment as the kubelet would:
// envFrom first, then env, with fieldRef/resourceFieldRef given stand-in
// values. Every reference must resolve to a rendered ConfigMap or Secret.
func (r *rendered) containerEnv(t *testing.T, podName string, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := r.configMaps[from.ConfigMapRef.Name]
			if !ok {
				t.Errorf("%s: container %s: envFrom ConfigMap %q is not rendered", r.dir, c.Name, from.ConfigMapRef.Name)
				continue
			}
			for k, v := range cm.Data {
				env[from.Prefix+k] = v
			}
		case from.SecretRef != nil:
			s, ok := r.secrets[from.SecretRef.Name]
			if !ok {
				t.Errorf("%s: container %s: envFrom Secret %q is not rendered", r.dir, c.Name, from.SecretRef.Name)
				continue
			}
			for k, v := range s.StringData {
				env[from.Prefix+k] = v
			}
			for k, v := range s.Data {
				env[from.Prefix+k] = string(v)
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, env)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, ok := r.configMaps[ref.Name]
			v, ok2 := "", false
			if ok {
				v, ok2 = cm.Data[ref.Key]
			}
			if !ok2 {
				t.Errorf("%s: container %s: env %s: ConfigMap key %s/%s is not rendered", r.dir, c.Name, e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = v
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, ok := r.secrets[ref.Name]
			v, ok2 := "", false
			if ok {
				v, ok2 = secretValue(s, ref.Key)
			}
			if !ok2 {
				t.Errorf("%s: container %s: env %s: Secret key %s/%s is not rendered", r.dir, c.Name, e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = v
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				env[e.Name] = podName
			case "metadata.namespace":
				env[e.Name] = "graveler"
			default:
				env[e.Name] = "field"
			}
		case e.ValueFrom.ResourceFieldRef != nil:
			env[e.Name] = "1"
		}
	}
	return env
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(VAR) as Kubernetes does in env values, command and args.
func expand(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

func expandArgs(t *testing.T, where string, args []string, env map[string]string) []string {
	t.Helper()
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expand(a, env)
		if varRef.MatchString(out[i]) {
			t.Errorf("%s: argument %q refers to a variable the container does not define", where, a)
		}
	}
	return out
}

// flagName returns the flag name of an argument like --name=value.
func flagName(arg string) (string, bool) {
	if !strings.HasPrefix(arg, "-") {
		return "", false
	}
	name := strings.TrimLeft(arg, "-")
	name, _, _ = strings.Cut(name, "=")
	return name, name != ""
}

// podTemplates returns every pod template of the rendering, by workload.
func (r *rendered) podTemplates() map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for n, d := range r.deployments {
		out["Deployment/"+n] = &d.Spec.Template
	}
	for n, s := range r.statefulSets {
		out["StatefulSet/"+n] = &s.Spec.Template
	}
	for n, c := range r.cronJobs {
		out["CronJob/"+n] = &c.Spec.JobTemplate.Spec.Template
	}
	return out
}

// volumeFor returns the volume mounted at the deepest mount point holding
// path in c, and the mount.
func volumeFor(spec *corev1.PodSpec, c corev1.Container, path string) (*corev1.Volume, *corev1.VolumeMount) {
	var best *corev1.VolumeMount
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		mp := strings.TrimSuffix(m.MountPath, "/")
		if path == mp || strings.HasPrefix(path, mp+"/") {
			if best == nil || len(mp) > len(best.MountPath) {
				best = m
			}
		}
	}
	if best == nil {
		return nil, nil
	}
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == best.Name {
			return &spec.Volumes[i], best
		}
	}
	return nil, best
}

func selectorMatches(sel map[string]string, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func containerPort(c corev1.Container, name string) (int32, bool) {
	i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == name })
	if i < 0 {
		return 0, false
	}
	return c.Ports[i].ContainerPort, true
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(b)
}
