// Command fakegpu is a kubelet device plugin that advertises N fake AMD GPUs as amd.com/gpu, the
// way ROCm/k8s-device-plugin does on a real node, so the scheduler and the kubelet's device
// manager really account for GPUs on a machine that has none.
//
// What it copies from ROCm/k8s-device-plugin (commit 0821507, cited by file and function):
//   - the resource name: namespace "amd.com" (internal/pkg/plugin/plugin.go,
//     AMDGPULister.GetResourceNamespace) + plugin "gpu", registered as "amd.com/gpu" on the socket
//     "<DevicePluginPath>amd.com_gpu" with Version v1beta1
//     (vendor/github.com/kubevirt/device-plugin-manager/pkg/dpm/plugin.go, newDevicePlugin and
//     register);
//   - device ids: the GPU's PCI address (internal/pkg/amdgpu/amdgpu.go, GetAMDGPUs keys devices by
//     filepath.Base of /sys/module/amdgpu/drivers/pci:amdgpu/0000:xx:00.0), each with a NUMA
//     node in Topology;
//   - ListAndWatch: one list with every device Healthy, then the list again on every heartbeat,
//     until SIGTERM (plugin.go, ListAndWatch);
//   - Allocate: one ContainerAllocateResponse per container request. The real one hands /dev/kfd
//     and each GPU's /dev/dri/card* and renderD* nodes; this machine has none of those, so ours
//     hands no device nodes. Neither sets any environment variable or mount (plugin.go, Allocate);
//   - GetDevicePluginOptions: empty options (no PreStartContainer, no preferred allocation).
//
// Like the kubevirt device-plugin-manager the real plugin uses, it registers again when the
// kubelet restarts (the kubelet removes every socket in the directory and creates kubelet.sock
// anew).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const (
	resourceNamespace = "amd.com"
	pluginName        = "gpu"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices   []*pluginapi.Device
	heartbeat time.Duration
	stop      chan struct{}
}

func fakeDevices(n int) []*pluginapi.Device {
	devs := make([]*pluginapi.Device, n)
	for i := range devs {
		devs[i] = &pluginapi.Device{
			// PCI-address ids, as GetAMDGPUs reports real GPUs (bus numbers are made up)
			ID:       fmt.Sprintf("0000:%02x:00.0", 0x11+i),
			Health:   pluginapi.Healthy,
			Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: 0}}},
		}
	}
	return devs
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	tick := time.NewTicker(p.heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
				return err
			}
		case <-p.stop:
			return nil
		case <-s.Context().Done():
			return nil
		}
	}
}

func (p *plugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	known := map[string]bool{}
	for _, d := range p.devices {
		known[d.ID] = true
	}
	resp := &pluginapi.AllocateResponse{}
	for _, req := range r.ContainerRequests {
		for _, id := range req.DevicesIds {
			if !known[id] {
				return nil, fmt.Errorf("unknown device id %q", id)
			}
			log.Printf("allocating device %s", id)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{})
	}
	return resp, nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// serve listens on the plugin's socket and registers it with the kubelet.
func serve(p *plugin, dir string) (*grpc.Server, error) {
	sock := filepath.Join(dir, resourceNamespace+"_"+pluginName)
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go srv.Serve(lis)

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, filepath.Base(pluginapi.KubeletSocket)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(sock),
		ResourceName: resourceNamespace + "/" + pluginName,
	})
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("register with the kubelet: %w", err)
	}
	log.Printf("registered %s/%s with %d devices on %s", resourceNamespace, pluginName, len(p.devices), sock)
	return srv, nil
}

// inode of the kubelet's registration socket (0 while it is absent): a new one means a new kubelet.
func inode(path string) uint64 {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

func main() {
	n := flag.Int("devices", 8, "number of fake GPUs to advertise")
	dir := flag.String("plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory")
	heartbeat := flag.Duration("heartbeat", 30*time.Second, "how often ListAndWatch re-sends the device list")
	flag.Parse()
	if *n < 0 {
		log.Fatalf("--devices must be >= 0, got %d", *n)
	}
	p := &plugin{devices: fakeDevices(*n), heartbeat: *heartbeat, stop: make(chan struct{})}
	kubeletSock := filepath.Join(*dir, filepath.Base(pluginapi.KubeletSocket))

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	var srv *grpc.Server
	var registeredWith uint64
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		if ino := inode(kubeletSock); ino != 0 && ino != registeredWith {
			if srv != nil {
				srv.Stop()
				srv = nil
			}
			s, err := serve(p, *dir)
			if err != nil {
				log.Printf("%v (retrying)", err)
			} else {
				srv, registeredWith = s, ino
			}
		}
		select {
		case <-tick.C:
		case <-sigs:
			close(p.stop)
			if srv != nil {
				srv.Stop()
			}
			os.Remove(filepath.Join(*dir, resourceNamespace+"_"+pluginName))
			return
		}
	}
}
