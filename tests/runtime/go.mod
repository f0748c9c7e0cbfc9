module ipam-delegated.test/runtime

go 1.22

require github.com/containernetworking/cni v1.3.0
