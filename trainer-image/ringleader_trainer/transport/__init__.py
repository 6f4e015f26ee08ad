"""The trainer's own sockets: the job-token handshake every connection opens with (`auth`), the gate that admits
a listener's peers (`gate`), the parameter server's wire format (`wire`) and the ring allreduce's links
(`ring_links`)."""
