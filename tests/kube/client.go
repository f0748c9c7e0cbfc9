package main

// The client commands, each with the credentials of a kubeconfig:
//   apply: every object of the manifests, by server-side apply (as
//     `kubectl apply --server-side --force-conflicts`), in order; a
//     CustomResourceDefinition is waited for until established, so that the
//     objects after it may be of its kind. Prints "applied KIND NAME" each.
//   token: a token of a ServiceAccount (TokenRequest), written as a
//     kubeconfig of the same server and CA with that bearer token.
//   request: one HTTP request; prints the status code on the first line,
//     then the body. Exits 0 whatever the status.
//   can-i: a SelfSubjectAccessReview; prints "yes" or "no" (and the reason).

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

const timeout = 60 * time.Second

// clientFlags: a flag set with --kubeconfig (required), and the config it names.
type clientFlags struct {
	*flag.FlagSet
	kubeconfig *string
}

func newClientFlags(name string) clientFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return clientFlags{fs, fs.String("kubeconfig", "", "the kubeconfig whose credentials to use")}
}

func (f clientFlags) config() (*rest.Config, error) {
	if *f.kubeconfig == "" {
		return nil, errors.New("--kubeconfig is required")
	}
	config, err := clientcmd.BuildConfigFromFlags("", *f.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", *f.kubeconfig, err)
	}
	config.QPS, config.Burst = 100, 200
	return config, nil
}

func apply(args []string) error {
	flags := newClientFlags("apply")
	if err := flags.Parse(args); err != nil {
		return err
	}
	config, err := flags.config()
	if err != nil {
		return err
	}
	if flags.NArg() == 0 {
		return errors.New("usage: apply --kubeconfig FILE MANIFEST...")
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, file := range flags.Args() {
		objects, err := readManifest(file)
		if err != nil {
			return err
		}
		for _, obj := range objects {
			what := fmt.Sprintf("%s: %s %s", file, obj.GetKind(), obj.GetName())
			mapping, err := mapFor(ctx, mapper, obj.GroupVersionKind())
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			resource := dyn.Resource(mapping.Resource)
			var target dynamic.ResourceInterface = resource
			if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
				if obj.GetNamespace() == "" {
					obj.SetNamespace("default")
				}
				target = resource.Namespace(obj.GetNamespace())
			}
			applied, err := target.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "kube-test", Force: true})
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			if obj.GroupVersionKind().GroupKind() == (schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}) {
				if err := waitEstablished(ctx, resource, applied.GetName()); err != nil {
					return fmt.Errorf("%s: %w", what, err)
				}
				mapper.Reset()
			}
			fmt.Printf("applied %s %s\n", obj.GetKind(), qualified(obj))
		}
	}
	return nil
}

func qualified(obj *unstructured.Unstructured) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}

// readManifest: the objects of a file of YAML documents, empty ones skipped.
func readManifest(file string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objects []*unstructured.Unstructured
	for {
		var fields map[string]any
		if err := decoder.Decode(&fields); err != nil {
			if errors.Is(err, io.EOF) {
				return objects, nil
			}
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(fields) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{Object: fields}
		if obj.GetKind() == "" || obj.GetAPIVersion() == "" || obj.GetName() == "" {
			return nil, fmt.Errorf("%s: an object without kind, apiVersion or metadata.name: %v", file, fields)
		}
		objects = append(objects, obj)
	}
}

// mapFor: the resource of a kind, asking discovery again while a kind just
// defined is not served yet.
func mapFor(ctx context.Context, mapper *restmapper.DeferredDiscoveryRESTMapper, gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	for {
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil || !meta.IsNoMatchError(err) {
			return mapping, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(200 * time.Millisecond):
			mapper.Reset()
		}
	}
}

func waitEstablished(ctx context.Context, crds dynamic.NamespaceableResourceInterface, name string) error {
	for {
		obj, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conditions {
			cond, _ := c.(map[string]any)
			if cond["type"] == string(apiextensionsv1.Established) && cond["status"] == "True" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not established within %v", timeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func token(args []string) error {
	flags := newClientFlags("token")
	namespace := flags.String("namespace", "", "the ServiceAccount's namespace")
	name := flags.String("service-account", "", "the ServiceAccount")
	out := flags.String("out", "", "the kubeconfig to write")
	seconds := flags.Int64("seconds", 3600, "how long the token is valid")
	if err := flags.Parse(args); err != nil {
		return err
	}
	config, err := flags.config()
	if err != nil {
		return err
	}
	if *namespace == "" || *name == "" || *out == "" || flags.NArg() != 0 {
		return errors.New("usage: token --kubeconfig FILE --namespace NS --service-account NAME --out FILE [--seconds N]")
	}
	clients, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: seconds}}
	issued, err := clients.CoreV1().ServiceAccounts(*namespace).CreateToken(ctx, *name, request, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("ServiceAccount %s/%s: %w", *namespace, *name, err)
	}
	return writeKubeconfig(*out, config.Host, config.CAData, user{token: issued.Status.Token})
}

func request(args []string) error {
	flags := newClientFlags("request")
	accept := flags.String("accept", "", "the Accept header (e.g. a server-side Table's)")
	contentType := flags.String("content-type", "application/json", "the body's Content-Type (e.g. application/merge-patch+json)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	config, err := flags.config()
	if err != nil {
		return err
	}
	if flags.NArg() < 2 || flags.NArg() > 3 {
		return errors.New("usage: request --kubeconfig FILE [--accept TYPE] [--content-type TYPE] METHOD PATH [BODY-FILE]")
	}
	method, path := flags.Arg(0), flags.Arg(1)
	var body []byte
	if flags.NArg() == 3 {
		if body, err = os.ReadFile(flags.Arg(2)); err != nil {
			return err
		}
	}
	client, err := rest.HTTPClientFor(config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := newRequest(ctx, method, strings.TrimSuffix(config.Host, "/")+path, body)
	if err != nil {
		return err
	}
	if *accept != "" {
		req.Header.Set("Accept", *accept)
	}
	if body != nil {
		req.Header.Set("Content-Type", *contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Printf("%d\n%s\n", resp.StatusCode, answer)
	return nil
}

func canI(args []string) error {
	flags := newClientFlags("can-i")
	namespace := flags.String("namespace", "", "the namespace (none: cluster-wide)")
	name := flags.String("name", "", "the object's name (none: any)")
	// Flags first, then VERB RESOURCE (the flag package stops at the first argument).
	if err := flags.Parse(args); err != nil {
		return err
	}
	config, err := flags.config()
	if err != nil {
		return err
	}
	if flags.NArg() != 2 {
		return errors.New("usage: can-i --kubeconfig FILE [--namespace NS] [--name NAME] VERB RESOURCE[.GROUP][/SUBRESOURCE]")
	}
	verb, resource := flags.Arg(0), flags.Arg(1)
	resource, subresource, _ := strings.Cut(resource, "/")
	resource, group, _ := strings.Cut(resource, ".")
	clients, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: *namespace, Verb: verb, Group: group, Resource: resource, Subresource: subresource, Name: *name,
		},
	}}
	answer, err := clients.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if answer.Status.Allowed {
		fmt.Println("yes")
	} else {
		fmt.Printf("no %s\n", answer.Status.Reason)
	}
	return nil
}

// newRequest: a request with body (JSON) if there is one.
func newRequest(ctx context.Context, method, url string, body []byte) (*http.Request, error) {
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, reader)
	if err == nil && body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, err
}
