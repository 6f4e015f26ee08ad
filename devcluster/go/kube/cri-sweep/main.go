// Command cri-sweep stops and removes every pod sandbox a CRI runtime holds, so that the runtime runs its CNI
// DEL (veth, IP lease) and unmounts each pod's network namespace before it is stopped: the real node's
// teardown runs it, also after its kubelet was killed and could not remove its pods itself.
//
//	cri-sweep unix:///path/to/containerd.sock
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: cri-sweep unix:///path/to/runtime.sock")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(os.Args[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail("connect", err)
	}
	defer conn.Close()
	client := runtime.NewRuntimeServiceClient(conn)
	list, err := client.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
	if err != nil {
		fail("list pod sandboxes", err)
	}
	failed := 0
	for _, pod := range list.Items {
		name := pod.Metadata.Namespace + "/" + pod.Metadata.Name
		if _, err := client.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: pod.Id}); err != nil {
			fmt.Fprintf(os.Stderr, "cri-sweep: stop %s: %v\n", name, err)
			failed++
			continue
		}
		if _, err := client.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: pod.Id}); err != nil {
			fmt.Fprintf(os.Stderr, "cri-sweep: remove %s: %v\n", name, err)
			failed++
		}
	}
	fmt.Printf("removed %d of %d pod sandboxes\n", len(list.Items)-failed, len(list.Items))
	if failed > 0 {
		os.Exit(1)
	}
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "cri-sweep: %s: %v\n", what, err)
	os.Exit(1)
}
