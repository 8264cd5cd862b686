// Command kstatus prints what the kstatus library (sigs.k8s.io/cli-utils
// pkg/kstatus/status, the code Flux, `kpt live status` and cli-utils appliers
// use to decide "is this resource reconciled?") computes for Kubernetes
// objects: one JSON record per object, in input order.
//
// Usage: kstatus [FILE...]   (no FILE or "-": read stdin)
//
// Input: JSON or YAML, several documents per file; a list (`kubectl get -o
// json` of many objects, kind ...List) counts as its items.
// Output: a JSON array of {apiVersion, kind, namespace, name, status, message}
// where status is status.Compute's Result.Status (InProgress, Current,
// Failed, Terminating) and message its Result.Message.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type record struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	Status     string `json:"status"`
	Message    string `json:"message"`
}

func main() {
	paths := os.Args[1:]
	if len(paths) == 0 {
		paths = []string{"-"}
	}
	records := []record{}
	for _, path := range paths {
		objs, err := readObjects(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: %s: %v\n", path, err)
			os.Exit(1)
		}
		for _, obj := range objs {
			result, err := status.Compute(obj)
			if err != nil {
				fmt.Fprintf(os.Stderr, "kstatus: %s: %s %s/%s: %v\n", path, obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
				os.Exit(1)
			}
			records = append(records, record{
				APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName(),
				Status: string(result.Status), Message: result.Message,
			})
		}
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	if err := out.Encode(records); err != nil {
		fmt.Fprintf(os.Stderr, "kstatus: %v\n", err)
		os.Exit(1)
	}
}

// readObjects decodes every document of one file ("-": stdin), expanding lists.
func readObjects(path string) ([]*unstructured.Unstructured, error) {
	var in io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = f
	}
	decoder := utilyaml.NewYAMLOrJSONDecoder(in, 4096)
	var objs []*unstructured.Unstructured
	for n := 1; ; n++ {
		var raw json.RawMessage
		if err := decoder.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue // an empty YAML document
		}
		// the unstructured JSON scheme keeps integers int64, as status.Compute expects
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if obj.IsList() {
			list, err := obj.ToList()
			if err != nil {
				return nil, fmt.Errorf("document %d: %w", n, err)
			}
			for i := range list.Items {
				objs = append(objs, &list.Items[i])
			}
			continue
		}
		objs = append(objs, obj)
	}
}
