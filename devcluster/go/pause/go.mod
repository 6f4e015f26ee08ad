// The real node's sandbox (pause) image: the process that holds each pod's namespaces. Built from this folder
// with no dependencies, statically, so the image is this one file.
module ringleader.dev/devcluster/pause

go 1.24.0
