# A rule added to the default policy's own package: it counts, but the fast
# path is then off and every decision takes the general rules.
package interlink.authz

violations contains "offloading to vk-maintenance is paused" if {
	input.operation == "create"
	input.node.name == "vk-maintenance"
}
