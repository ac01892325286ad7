! A host-code stand-in for the UMAT tests: reads a loading history, calls UMAT once per increment the
! way a finite-element code does at one integration point (STRESS and STATEV handed back, STRAN the
! accumulated strain), and writes what the UMAT returned.
!
! input (list-directed):  nprops / props(1:nprops) / nstatv / nsteps /
!                         nsteps lines of: time_old dtime dstran(1:6)   (Abaqus order, engineering shear)
! output, one line per increment: pnewdt stress(1:6) statev(1:nstatv) ddsdde(1:36) (column-major)
! A rejected increment (PNEWDT < 1) is not accumulated: STRAN, STRESS and STATEV stay as they were.
program umat_driver
  implicit none
  integer, parameter :: dp = kind(1.0d0)
  integer :: nprops, nstatv, nsteps, n, ndi, nshr, ntens, noel, npt, layer, kspt, kinc, jstep(4)
  real(dp), allocatable :: props(:), statev(:), statev_in(:)
  real(dp) :: stress(6), stress_in(6), ddsdde(6, 6), stran(6), dstran(6), time(2), dtime, pnewdt
  real(dp) :: sse, spd, scd, rpl, ddsddt(6), drplde(6), drpldt, temp, dtemp, predef(1), dpred(1)
  real(dp) :: coords(3), drot(3, 3), celent, dfgrd0(3, 3), dfgrd1(3, 3), told
  character(len=80) :: cmname
  character(len=256) :: infile, outfile

  call get_command_argument(1, infile)
  call get_command_argument(2, outfile)
  open(10, file=trim(infile), status='old', action='read')
  read(10, *) nprops
  allocate(props(max(nprops, 1)))
  if (nprops > 0) read(10, *) props(1:nprops)
  read(10, *) nstatv
  allocate(statev(max(nstatv, 1)), statev_in(max(nstatv, 1)))
  read(10, *) nsteps
  open(11, file=trim(outfile), status='replace', action='write')
  stress = 0.0d0; statev = 0.0d0; stran = 0.0d0; ddsdde = 0.0d0
  ndi = 3; nshr = 3; ntens = 6; noel = 1; npt = 1; layer = 1; kspt = 1; jstep = 1
  cmname = 'MODELC'; coords = 0.0d0; drot = 0.0d0; celent = 1.0d0; dfgrd0 = 0.0d0; dfgrd1 = 0.0d0
  temp = 0.0d0; dtemp = 0.0d0; predef = 0.0d0; dpred = 0.0d0
  do n = 1, nsteps
    read(10, *) told, dtime, dstran
    time(1) = told; time(2) = told; kinc = n
    pnewdt = 1.0d30
    stress_in = stress; statev_in = statev
    call umat(stress, statev, ddsdde, sse, spd, scd, rpl, ddsddt, drplde, drpldt, stran, dstran, &
              time, dtime, temp, dtemp, predef, dpred, cmname, ndi, nshr, ntens, nstatv, props, &
              nprops, coords, drot, pnewdt, celent, dfgrd0, dfgrd1, noel, npt, layer, kspt, jstep, kinc)
    write(11, '(*(es25.17))') pnewdt, stress, statev(1:nstatv), ddsdde
    if (pnewdt < 1.0d0) then
      stress = stress_in; statev = statev_in   ! the host abandons the increment
    else
      stran = stran + dstran
    end if
  end do
  close(10)
  close(11)
end program umat_driver
