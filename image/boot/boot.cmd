# pincer A/B boot script (U-Boot; scripts/image compiles it to boot.scr with mkimage).
# The same script runs on the Raspberry Pi (u-boot-rpi, rpi_arm64: Pi 3, 4, Zero 2 W) and
# on QEMU's `-M virt` (u-boot-qemu, qemu_arm64), from the FAT boot partition that U-Boot's
# distro boot finds (devtype/devnum set by it).
#
# RAUC's U-Boot integration: BOOT_ORDER lists the slots to try in order ("A B"), and
# BOOT_A_LEFT / BOOT_B_LEFT the attempts each has left. Every boot takes one attempt from
# the slot it boots; userland gives them back once the slot is good (`rauc status
# mark-good`, done by `pincer update confirm`). A slot that never gets there runs out of
# attempts and the next one in BOOT_ORDER boots instead: no keyboard needed.
#
# The variables live in pincer-ab.env on the boot partition (16 KiB, CRC-protected, the
# format fw_setenv writes: /etc/fw_env.config points RAUC's fw_printenv/fw_setenv at it),
# not in U-Boot's own environment: the Pi's U-Boot would replace its whole default
# environment with that file if it were its uboot.env, and QEMU's keeps its own in flash.

setenv ab_env pincer-ab.env
setenv ab_env_size 0x4000
setenv ab_vars "BOOT_ORDER BOOT_A_LEFT BOOT_B_LEFT"
if load ${devtype} ${devnum}:1 ${kernel_addr_r} ${ab_env}; then
	env import -c ${kernel_addr_r} ${ab_env_size} ${ab_vars}
fi
test -n "${BOOT_ORDER}" || setenv BOOT_ORDER "A B"
test -n "${BOOT_A_LEFT}" || setenv BOOT_A_LEFT 3
test -n "${BOOT_B_LEFT}" || setenv BOOT_B_LEFT 3

setenv bootpart
setenv raucslot
for BOOT_SLOT in "${BOOT_ORDER}"; do
	if test "x${bootpart}" != "x"; then
		# a slot was chosen already
	elif test "x${BOOT_SLOT}" = "xA"; then
		if test ${BOOT_A_LEFT} -gt 0; then
			setexpr BOOT_A_LEFT ${BOOT_A_LEFT} - 1
			echo "pincer: booting slot A (${BOOT_A_LEFT} attempts left after this one)"
			setenv bootpart 2
			setenv raucslot A
		fi
	elif test "x${BOOT_SLOT}" = "xB"; then
		if test ${BOOT_B_LEFT} -gt 0; then
			setexpr BOOT_B_LEFT ${BOOT_B_LEFT} - 1
			echo "pincer: booting slot B (${BOOT_B_LEFT} attempts left after this one)"
			setenv bootpart 3
			setenv raucslot B
		fi
	fi
done

if test -z "${raucslot}"; then
	echo "pincer: no slot has attempts left; giving every slot 3 again and resetting"
	setenv BOOT_A_LEFT 3
	setenv BOOT_B_LEFT 3
	env export -c -s ${ab_env_size} ${kernel_addr_r} ${ab_vars}
	fatwrite ${devtype} ${devnum}:1 ${kernel_addr_r} ${ab_env} ${ab_env_size}
	reset
fi
env export -c -s ${ab_env_size} ${kernel_addr_r} ${ab_vars}
fatwrite ${devtype} ${devnum}:1 ${kernel_addr_r} ${ab_env} ${ab_env_size}

# The kernel, its initrd and device trees come from the slot, so a slot carries its own.
# The root is found by PARTUUID (the image's fixed disk signature), not by label: RAUC
# writes the same filesystem image to either slot.
part uuid ${devtype} ${devnum}:${bootpart} rootuuid
if test "${board}" = "rpi"; then
	# The serial console last: /dev/console, where systemd reports boot progress.
	setenv console "console=tty1 console=ttyS1,115200"
	load ${devtype} ${devnum}:${bootpart} ${fdt_addr_r} /boot/dtbs/${fdtfile} && setenv fdt_addr ${fdt_addr_r}
else
	setenv console "console=ttyAMA0"
fi
setenv bootargs "${console} root=PARTUUID=${rootuuid} rauc.slot=${raucslot} pincer.data=LABEL=pincer-data ro rootwait net.ifnames=0 panic=10"
load ${devtype} ${devnum}:${bootpart} ${kernel_addr_r} /boot/vmlinuz || reset
load ${devtype} ${devnum}:${bootpart} ${ramdisk_addr_r} /boot/initrd.img || reset
booti ${kernel_addr_r} ${ramdisk_addr_r}:${filesize} ${fdt_addr}
echo "pincer: booti returned: resetting"
reset
